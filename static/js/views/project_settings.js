// Project settings (#/projects/:projectId/settings): every setting in its group, saved
// with a partial PUT; changes made elsewhere flow into the fields not being edited; and
// deleting the project.

import { h, toast } from "../dom.js";
import { onLanguageChange, register, t } from "../i18n.js";
import { go } from "../main.js";
import { api, onEvent } from "../store.js";
import { projectHeader } from "./common.js";
import { confirmDelete } from "./item_list.js";
import { projectForm } from "./project_form.js";

register({  // key: [English, Turkish]
  "psettings.key": ["Task keys start with {key}.", "Görev anahtarları {key} ile başlar."],
  "psettings.danger": ["Delete the project", "Projeyi sil"],
  "psettings.dangerHelp": ["Stops its agents and removes its tasks, logs, templates, snippets, webhooks and attachments. The code directory is not touched.", "Ajanlarını durdurur; görevlerini, kayıtlarını, şablonlarını, parçacıklarını, web kancalarını ve eklerini siler. Kod dizinine dokunulmaz."],
  "psettings.delete": ["Delete project", "Projeyi sil"],
  "psettings.deleteDetail": ["Its tasks, logs, templates, snippets, webhooks and attachments are removed.", "Görevleri, kayıtları, şablonları, parçacıkları, web kancaları ve ekleri silinir."],
  "psettings.deleted": ["Project {name} deleted", "{name} projesi silindi"],
  "psettings.goneElsewhere": ["This project was deleted.", "Bu proje silindi."],
  "psettings.notFound": ["This project does not exist.", "Böyle bir proje yok."],
});

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  let project = null;
  let form = null;
  let failure = null;
  let deleting = false;
  const head = h("div");
  const body = h("div", { class: "project-settings" });
  const danger = h("section", { class: "card-panel danger-zone", hidden: true });
  root.append(head, body, danger);

  function renderChrome() {
    head.replaceChildren(projectHeader(projectId, "/settings"));
    if (project) {
      danger.hidden = false;
      danger.replaceChildren(h("h2", {}, t("psettings.danger")),
        h("p", { class: "muted" }, t("psettings.dangerHelp")),
        h("div", { class: "actions start" }, h("button", { type: "button", class: "danger", onclick: remove },
          t("psettings.delete"))));
    }
    const key = body.querySelector(".project-key");
    if (key && project) key.textContent = t("psettings.key", { key: project.key });
  }

  function renderBody() {
    if (failure) {
      body.replaceChildren(h("div", { class: "empty" }, h("p", { class: "error" }, failure())));
      danger.hidden = true;
      return;
    }
    if (!project) {
      body.replaceChildren(h("p", { class: "muted" }, t("common.loading")));
      return;
    }
    form = projectForm({
      mode: "edit",
      project,
      onSaved: (saved) => {
        project = saved;
        renderChrome();
        toast(t("common.saved"));
      },
    });
    body.replaceChildren(h("p", { class: "muted project-key" }, t("psettings.key", { key: project.key })),
      form.element);
  }

  async function remove() {
    if (!(await confirmDelete(project.name, t("psettings.deleteDetail")))) return;
    deleting = true;
    try {
      await api.deleteProject(projectId);
      toast(t("psettings.deleted", { name: project.name }));
      go("/");
    } catch (error) {
      deleting = false;
      toast(error.message, "error");
    }
  }

  const offEvent = onEvent(({ event, data }) => {
    if (!data || data.id !== projectId) {
      if (event === "resync") load();
      return;
    }
    if (event === "project:updated") {
      project = { ...project, ...data };
      if (form) form.update(data);
      renderChrome();
    } else if (event === "project:deleted" && !deleting) {
      failure = () => t("psettings.goneElsewhere");
      if (form) form.destroy();
      form = null;
      renderBody();
    }
  });
  const offLanguage = onLanguageChange(() => {
    renderChrome();
    if (failure) renderBody();
  });

  async function load() {
    try {
      const fresh = await api.project(projectId);
      if (project && form) {
        project = fresh;
        form.update(fresh);
      } else {
        project = fresh;
        renderBody();
      }
      renderChrome();
    } catch (error) {
      failure = error.status === 404 ? () => t("psettings.notFound") : () => error.message;
      renderBody();
    }
  }

  renderChrome();
  renderBody();
  load();
  return () => {
    offEvent();
    offLanguage();
    if (form) form.destroy();
  };
}
