// Hash routes (#/projects/3) to view modules. Each view module exports
// mount(root, params) and returns unmount().

/**
 * What a route's params may be: ids, positive integers as the URL writes them (not decoded:
 * an id has nothing to decode). Views put params into API paths, so a value from the URL such
 * as "1%2F..%2F..%2Fsettings" must never reach one (design §11): a hash whose params are not
 * ids names no route and shows the not-found view. A route that needs another kind of param
 * would need a check of its own here; none does.
 */
const ID = /^[1-9]\d*$/;

/** @type {{pattern: RegExp, names: string[], load: () => Promise<any>}[]} */
const routes = [];

/**
 * route("/projects/:id/board", () => import("./views/board.js"))
 * @param {string} path
 * @param {() => Promise<{mount: Function}>} load
 */
export function route(path, load) {
  const names = [];
  const pattern = new RegExp(`^${path.replace(/:(\w+)/g, (_, name) => {
    names.push(name);
    return "([^/]+)";
  })}$`);
  routes.push({ pattern, names, load });
}

/**
 * Which route a hash names: {route, params} or null (also when a param is not an id). Pure.
 * @param {string} hash  e.g. "#/projects/3"
 */
export function parseHash(hash) {
  const path = (hash || "").replace(/^#/, "").split("?")[0] || "/";
  for (const candidate of routes) {
    const match = candidate.pattern.exec(path);
    if (!match) continue;
    const raws = match.slice(1);
    if (!raws.every((raw) => ID.test(raw) && Number.isSafeInteger(Number(raw)))) return null;
    const params = {};
    candidate.names.forEach((name, i) => { params[name] = Number(raws[i]); });
    return { route: candidate, params };
  }
  return null;
}

/**
 * An id given in the hash's query (#/tasks/7?approval=12 → queryId(hash, "approval") = 12), or
 * null when absent or not an id. Pure.
 * @param {string} hash
 * @param {string} name
 * @returns {number|null}
 */
export function queryId(hash, name) {
  const query = (hash || "").split("?")[1] || "";
  const raw = new URLSearchParams(query).get(name);
  return raw !== null && ID.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : null;
}

let unmount = null;
let generation = 0;

/**
 * Show the view of the current hash in root; again on every hash change. Resolves once the
 * first view is mounted (or could not be).
 */
export function start(root, notFound) {
  const show = async () => {
    const mine = ++generation;
    const found = parseHash(location.hash);
    if (unmount) {
      try { unmount(); } catch (error) { console.warn(error); }
      unmount = null;
    }
    root.replaceChildren();
    if (!found) {
      unmount = notFound(root);
      return;
    }
    try {
      const module = await found.route.load();
      if (mine !== generation) return;  // the user went elsewhere meanwhile
      unmount = module.mount(root, found.params) || null;
    } catch (error) {  // e.g. the server's API description lacks what the view needs
      if (mine !== generation) return;
      root.replaceChildren(failed(error));
    }
    root.dataset.route = location.hash;  // which view is shown (for tests and styles)
    root.focus({ preventScroll: true });
  };
  window.addEventListener("hashchange", show);
  return show();
}

/** What a view that could not be shown says instead. */
function failed(error) {
  const section = document.createElement("section");
  section.className = "empty";
  section.setAttribute("role", "alert");
  section.dataset.testid = "view-error";
  const p = document.createElement("p");
  p.textContent = error.message;
  section.append(p);
  return section;
}

/** Go to a hash route: go("/projects/3"). */
export function go(path) {
  location.hash = `#${path}`;
}
