// The project create/edit form: the create dialog asks for the basic fields, project
// settings show every field in its group and save only what changed. The fields themselves
// (groups, labels, the server's limits) are in project_fields.js; the "Runs on" select
// follows the hosts as they are added, renamed or deleted.

import { api } from "../api.js";
import { h, toast } from "../dom.js";
import { t } from "../i18n.js";
import { defaultOf } from "../schema.js";
import { subscribe } from "../store.js";
import { avatar } from "./common.js";
import { formKit, liveForm } from "./form_kit.js";
import { CREATE_KEYS, GROUPS, fillHostSelect, projectSpecs, suggestSlug } from "./project_fields.js";

/** How the create dialog asks for a field, where it differs from the settings. */
const CREATE_CHANGES = {
  allowedTools: { skip: (raw) => raw.permissionMode !== "allow-tools" },
  autoBranch: { help: () => t("pform.autoBranch.create") },
};

/**
 * The project form. mode "create" asks for the create fields and POSTs; "edit" shows every
 * setting in its group and PUTs only what changed. onSaved(project) gets the answer.
 * @param {{mode: "create"|"edit", project?: Object, onSaved: (project: Object) => void, onCancel?: () => void}} options
 * @returns {{element: HTMLFormElement, update: (project: Object) => void, destroy: () => void}}
 */
export function projectForm({ mode, project = {}, onSaved, onCancel }) {
  const create = mode === "create";
  const specs = projectSpecs().filter((spec) => !create || CREATE_KEYS.includes(spec.key))
    .map((spec) => (create ? { ...spec, ...CREATE_CHANGES[spec.key] } : spec));
  // A branch and worktree per task is on in the create dialog (the API's default is off, as
  // every flag's): your checkout is never touched, and agents at once do not share it.
  const source = create ? { permissionMode: defaultOf("Project", "permissionMode"),
    agent: defaultOf("Project", "agent"), autoBranch: true, ...project } : project;
  const kit = formKit(specs, source);
  let slugTouched = !create || Boolean(source.slug);
  let current = { ...project };

  const preview = () => avatar({ ...current, name: kit.raw.name, slug: kit.raw.slug,
    icon: kit.raw.icon, iconSeed: kit.raw.iconSeed });
  /** The icon shows once there is a name or an icon to make it of (a lone "?" read as help). */
  const previewed = () => Boolean(kit.raw.name.trim() || kit.raw.icon.trim());
  const onHost = () => kit.raw.host !== undefined && kit.raw.host !== "";
  const sharing = () => Number(kit.raw.maxConcurrent) > 1 && !kit.raw.autoBranch && !onHost();
  const shareWarning = () => h("p", { class: "warning", role: "status", "data-warning": "share",
    hidden: !sharing() }, t("pform.shareWarning"));
  const risky = () => kit.raw.sandbox === "none" && kit.raw.permissionMode === "auto-accept";
  const riskWarning = () => h("p", { class: "warning", role: "status", "data-warning": "sandbox",
    hidden: !risky() }, t("pform.sandbox.risk"));

  // What the create dialog's folder is (GET /api/folder, asked as it is typed): without a
  // git repository with a commit no task's branch can be made there (the server refuses
  // autoBranch), so the choice is off, cannot be turned on, and says why; it comes back on
  // when the folder becomes one.
  let folder = { path: "", why: null, turnedOff: false };  // why: "notRepo", "noCommit" or null
  let folderTimer = 0;
  const noGit = () => Boolean(create && !onHost() && folder.why);
  /** Ask what the typed folder is (once per path); resolves when the answer is shown. */
  const checkFolder = async () => {
    const dir = kit.raw.workingDir.trim();
    if (!create || dir === folder.path) return;
    let state = { directory: false };  // not a path yet (or no folder): its own error says
    if (dir.startsWith("/")) {
      try {
        state = await api.folder(dir);
      } catch {
        return;  // no answer: the server's own check at Create
      }
    }
    if (dir !== kit.raw.workingDir.trim()) return;  // typed on meanwhile: its own ask follows
    const why = !state.directory || state.commit ? null : state.repository ? "noCommit" : "notRepo";
    folder = { ...folder, path: dir, why };
    if (noGit() && kit.raw.autoBranch) folder.turnedOff = true;
    else if (!noGit() && folder.turnedOff) {
      folder.turnedOff = false;
      kit.raw.autoBranch = true;
    }
    if (noGit()) kit.raw.autoBranch = false;
    branchOnHost();
  };

  /**
   * On another machine every task has its branch and worktree (design §15): the checkbox
   * shows it on, and cannot be changed, with a note; in a folder where no branch can be made
   * it shows off, with a note; else its own value.
   */
  const branchOnHost = () => {
    const row = kit.rows.get("autoBranch");
    if (!row) return;
    const [box] = row.controls;
    box.checked = onHost() || (!noGit() && kit.raw.autoBranch);
    box.disabled = onHost() || noGit();
    const noteOf = (name, text) => {
      let note = row.element.querySelector(`[data-note=${name}]`);
      if (!note) {
        note = h("small", { class: "help", "data-note": name, role: "status" });
        row.element.querySelector("label").after(note);
      }
      note.textContent = text;
      return note;
    };
    noteOf("onHost", t("pform.autoBranch.onHost")).hidden = !onHost();
    noteOf("noGit", noGit() ? t("pform.autoBranch.noGit", { why: t(`pform.autoBranch.noGit.${folder.why}`) }) : "")
      .hidden = !noGit();
  };

  const build = () => {
    const rows = (group) => specs.filter((spec) => spec.group === group).map((spec) => {
      const row = kit.row(spec.key);
      if (spec.key === "allowedTools") row.hidden = kit.raw.permissionMode !== "allow-tools";
      if (spec.key === "repoUrl") row.hidden = kit.raw.host === "";
      if (["sandboxPaths", "network", "networkAllow"].includes(spec.key)) row.hidden = kit.raw.sandbox === "none";
      if (spec.key === "icon") {
        row.querySelector("label").append(h("span", { class: "icon-preview", "aria-hidden": "true", hidden: !previewed() },
          t("pform.icon.preview"), h("span", { class: "icon-preview-avatar" }, preview())));
      }
      if (spec.key === "autoBranch") branchOnHost();
      return row;
    });
    if (create) return h("div", { class: "form-grid" }, rows("basic"), rows("git"));
    return GROUPS.map((group) => h("fieldset", { class: "group", "data-group": group },
      h("legend", {}, t(`pform.group.${group}`)),
      group === "attempts" ? h("p", { class: "muted" }, t("pform.group.attempts.help")) : null, rows(group), group === "queue" ? shareWarning() : null,
      group === "sandbox" ? riskWarning() : null));
  };

  const form = liveForm({
    kit, build, onCancel, onlyDirty: !create,
    className: create ? "project-form create" : "project-form",
    submitLabel: () => t(create ? "pform.create" : "common.save"),
    onSubmit: async (body) => {
      if (!create && !Object.keys(body).length) {
        toast(t("form.noChanges"));
        return;
      }
      if (create && body.autoBranch) {  // created at once after typing the folder: ask first
        clearTimeout(folderTimer);
        await checkFolder();
        if (noGit()) return;  // the dialog now says why there is no branch per task
      }
      const saved = create ? await api.createProject(body) : await api.updateProject(project.id, body);
      current = saved;
      kit.reset(saved);
      derived();
      onSaved(saved);
    },
  });

  /** Keep what depends on other fields in step: tools row, icon preview, warning. */
  const derived = () => {
    const el = form.element;
    const tools = kit.rows.get("allowedTools");
    if (tools) tools.element.hidden = kit.raw.permissionMode !== "allow-tools";
    const repo = kit.rows.get("repoUrl");
    if (repo) repo.element.hidden = kit.raw.host === "";
    const slot = el.querySelector(".icon-preview");
    if (slot) {
      slot.hidden = !previewed();
      slot.querySelector(".icon-preview-avatar").replaceChildren(preview());
    }
    const warning = el.querySelector("[data-warning=share]");
    if (warning) warning.hidden = !sharing();
    for (const key of ["sandboxPaths", "network", "networkAllow"]) {
      const row = kit.rows.get(key);
      if (row) row.element.hidden = kit.raw.sandbox === "none";
    }
    const risk = el.querySelector("[data-warning=sandbox]");
    if (risk) risk.hidden = !risky();
    branchOnHost();
  };
  kit.onInput((key, value) => {
    if (key === "name" && !slugTouched) {
      kit.raw.slug = suggestSlug(value);
      const slug = kit.rows.get("slug");
      if (slug) slug.controls[0].value = kit.raw.slug;
    }
    if (key === "slug") slugTouched = value !== "";
    if (key === "workingDir" && create) {
      clearTimeout(folderTimer);
      folderTimer = setTimeout(checkFolder, 300);  // once the typing pauses
    }
    if (key === "autoBranch") folder.turnedOff = false;
    derived();
  });
  const offHosts = subscribe((s, event) => {
    const hostRow = kit.rows.get("host");
    if (hostRow && /^host(s:loaded|:created|:updated|:deleted)$/.test(event)) fillHostSelect(hostRow.controls[0], kit.raw.host);
  });

  return {
    element: form.element,
    kit,
    /** New server values (project:updated): untouched fields follow them. */
    update(next) {
      current = { ...current, ...next };
      kit.set(next);
      derived();
    },
    destroy() {
      clearTimeout(folderTimer);
      form.destroy();
      offHosts();
    },
  };
}
