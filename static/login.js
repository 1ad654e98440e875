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
    const next = new URLSearchParams(location.search).get("next");
    location.assign(next && next.startsWith("/") && !next.startsWith("//") ? next : "/");
    return;
  }
  const body = await response.json().catch(() => ({}));
  showError(response.status === 401 ? "That token is not right." : body.error || "Login failed.");
});

function showError(message) {
  error.textContent = message;
  error.hidden = false;
}
