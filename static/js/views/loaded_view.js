// A view that shows what it loaded from the server and loads it again (debounced) after the
// /ws events that change it: the agents, pipeline, stats and usage pages. It says when it is
// loading, when the load failed, and (for desktop commands) when the board is refused them
// because it is opened from another machine; it keeps the focused link and the scroll of
// [data-keep-scroll] boxes across renders.

import { append, clear, h } from "../dom.js";
import { onLanguageChange, t } from "../i18n.js";
import { onEvent, refusedLocally, state } from "../store.js";

/**
 * @param {HTMLElement} root
 * @param {Object} o
 * @param {() => Node} o.head  the top of the page (project header, or a title)
 * @param {(previous: any) => Promise<any>} o.load  fetch the data (previous: what was loaded before, or null)
 * @param {(data: any, view: Object) => any} o.render  the page below the head (nodes)
 * @param {(event: string, data: any) => "load"|"render"|null} o.on  what a /ws event asks for (resync always loads)
 * @param {number} o.delay  ms to wait before loading again after an event
 * @param {boolean} [o.desktop]  the data comes from desktop commands (403 local_only is explained)
 * @param {(data: any, view: Object) => void} [o.loaded]  after each successful load
 * @param {(data: any) => void} [o.rendered]  after the page is in the DOM
 * @returns {{data: any, error: string, load: () => Promise<void>, refresh: () => void, render: () => void,
 *   alive: () => boolean, stop: () => void}}
 */
export function loadedView(root, o) {
  let refused = Boolean(o.desktop && state.localOnlyRefused);
  let timer = null;
  let alive = true;
  let loading = false;
  let again = false;

  const view = {
    data: null,
    error: "",
    alive: () => alive,
    /** Load now; a load asked for while one runs follows it. */
    async load() {
      if (refused) return view.render();
      if (loading) {
        again = true;
        return undefined;
      }
      loading = true;
      again = false;
      try {
        const answer = await o.load(view.data);
        if (!alive) return undefined;
        view.data = answer;
        view.error = "";
      } catch (failure) {
        if (o.desktop && refusedLocally(failure)) refused = true;
        else view.error = failure.message;
      } finally {
        loading = false;
      }
      if (!alive) return undefined;
      view.render();
      if (again) view.refresh();
      else if (!refused && view.data !== null && o.loaded) o.loaded(view.data, view);
      return undefined;
    },
    /** Load again soon (several events in a row make one load). */
    refresh() {
      clearTimeout(timer);
      timer = setTimeout(view.load, o.delay);
    },
    render() {
      const focused = root.contains(document.activeElement) ? document.activeElement.getAttribute("href") : null;
      const scrolls = new Map([...root.querySelectorAll("[data-keep-scroll]")].map((el) => [el.dataset.keepScroll, el.scrollLeft]));
      clear(root);
      root.append(o.head());
      if (refused) {
        root.append(h("p", { class: "card-panel muted", role: "status", "data-testid": "local-only" }, t("common.localOnly")));
        return;
      }
      if (view.error) root.append(h("p", { class: "error", role: "alert" }, view.error));
      if (view.data === null) {
        if (!view.error) root.append(h("p", { class: "muted" }, t("common.loading")));
        return;
      }
      append(root, [o.render(view.data, view)]);
      for (const el of root.querySelectorAll("[data-keep-scroll]")) el.scrollLeft = scrolls.get(el.dataset.keepScroll) || 0;
      if (focused) root.querySelector(`[href="${CSS.escape(focused)}"]`)?.focus({ preventScroll: true });
      if (o.rendered) o.rendered(view.data);
    },
    stop() {
      alive = false;
      clearTimeout(timer);
      for (const off of offs) off();
    },
  };
  const offs = [
    onEvent(({ event, data }) => {
      const wanted = event === "resync" ? "load" : o.on(event, data);
      if (wanted === "load") view.refresh();
      else if (wanted === "render") view.render();
    }),
    onLanguageChange(() => view.render()),
  ];
  view.render();
  view.load();
  return view;
}

/** The project id of a task event's data (tasks say project_id, other events projectId). */
export const projectOf = (data) => data && (data.project_id ?? data.projectId);
