// The login page: trade the board's token for a session cookie, then open the board.
const form = document.querySelector("#login-form");
const error = document.querySelector("#login-error");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.hidden = true;
  const token = form.elements.token.value;
  let response;
  try {
    response = await fetch("/api/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token }),
    });
  } catch {
    showError("The server cannot be reached.");
    return;
  }
  if (response.ok) {
    location.assign(sameOrigin(new URLSearchParams(location.search).get("next")));
    return;
  }
  const body = await response.json().catch(() => ({}));
  showError(response.status === 401 ? "That token is not right." : body.error || "Login failed.");
});
// The button starts disabled: a click before this script ran would submit the form natively,
// putting the token in the address bar and showing no error.
form.querySelector("button").disabled = false;

function showError(message) {
  error.textContent = message;
  error.hidden = false;
}

/**
 * Where to go after the login: `next` only when it is a path on this board, else "/"
 * (design §11). A path starts with one `/` followed by neither `/` nor `\`: browsers read
 * `//evil.example` and `/\evil.example` as another site. No control characters either: the
 * URL parser drops tabs and newlines, so `/<tab>/evil.example` would become `//evil.example`.
 * @param {string | null} next  the `next` of the login page's address
 */
function sameOrigin(next) {
  return next && /^\/(?![/\\])/.test(next) && !/\p{Cc}/u.test(next) ? next : "/";
}
