// Schedules of a project (#/projects/:projectId/schedules, design §19): tasks made (or continued)
// on a clock. Each schedule with its cron and time zone, what a fire makes, an on/off switch
// that saves at once, its next fire (in its cron's time zone, named, and how far) and its last one (its task, or
// why it started nothing); create and edit in a dialog, delete after asking. Kept current by
// schedule:* events (schedule:fired brings a fire as it happens).

import { h } from "../dom.js";
import { dateTime, register, relative, t } from "../i18n.js";
import { defaultOf, integersOf } from "../schema.js";
import { api, onEvent, state } from "../store.js";
import { agentName, projectsLabel } from "./common.js";
import { schemaSpecs } from "./form_kit.js";
import { enabledSwitch, itemActions, mountItemList, saveEnabled } from "./item_list.js";

register({  // key: [English, Turkish]
  "schedules.title": ["Schedules", "Zamanlamalar"],
  "schedules.intro": ["Make a task on a clock — a nightly dependency check, a weekly clean-up — and start it through the queue and the daily cost limit; or send a message to the task it made last time.", "Bir saate göre görev oluşturun — her gece bağımlılık denetimi, haftalık temizlik — ve onu kuyruk ve günlük maliyet sınırı üzerinden başlatın; ya da son oluşturduğu göreve bir ileti gönderin."],
  "schedules.new": ["New schedule", "Yeni zamanlama"],
  "schedules.newTitle": ["New schedule", "Yeni zamanlama"],
  "schedules.editTitle": ["Edit schedule", "Zamanlamayı düzenle"],
  "schedules.empty": ["No schedules yet.", "Henüz zamanlama yok."],
  "schedules.loadFailed": ["The schedules could not be loaded: {error}", "Zamanlamalar yüklenemedi: {error}"],
  "schedules.name": ["Name", "Ad"],
  "schedules.cron": ["When (cron)", "Ne zaman (cron)"],
  "schedules.cron.help": ["minute hour day month weekday, e.g. 0 3 * * * = every night at 3; 0 9 * * 1 = Mondays at 9.", "dakika saat gün ay haftanın-günü; ör. 0 3 * * * = her gece saat 3'te; 0 9 * * 1 = pazartesileri saat 9'da."],
  "schedules.timezone": ["Time zone", "Saat dilimi"],
  "schedules.timezone.help": ["The cron is read in this IANA time zone, e.g. Europe/Istanbul. This browser's: {zone}.", "Cron bu IANA saat diliminde okunur; ör. Europe/Istanbul. Bu tarayıcınınki: {zone}."],
  "schedules.mode": ["Each fire", "Her tetiklemede"],
  "schedules.mode.new": ["makes a new task and starts it", "yeni bir görev oluşturup başlatır"],
  "schedules.mode.continue": ["sends a message to the task it made last", "son oluşturduğu göreve bir ileti gönderir"],
  "schedules.mode.help": ["A fire is skipped while the task it made last still runs.", "Son oluşturduğu görev hâlâ çalışıyorsa tetikleme atlanır."],
  "schedules.enabled": ["Enabled", "Etkin"],
  "schedules.task": ["The task", "Görev"],
  "schedules.task.title": ["Title", "Başlık"],
  "schedules.task.description": ["Description", "Açıklama"],
  "schedules.task.description.help": ["In “sends a message” mode, this (or else the title) is the message.", "“İleti gönderir” kipinde ileti budur (yoksa başlık)."],
  "schedules.task.type": ["Type", "Tür"],
  "schedules.task.priority": ["Priority", "Öncelik"],
  "schedules.task.model": ["Model", "Model"],
  "schedules.task.agent": ["Agent", "Ajan"],
  "schedules.task.effort": ["Effort", "Efor"],
  "schedules.when": ["When", "Ne zaman"],
  "schedules.makes": ["Each fire", "Her tetikleme"],
  "schedules.next": ["Next fire", "Sonraki tetikleme"],
  "schedules.last": ["Last fire", "Son tetikleme"],
  "schedules.at": ["{time} ({relative})", "{time} ({relative})"],
  "schedules.atZone": ["{time} {zone} ({relative})", "{time} {zone} ({relative})"],
  "schedules.effortChip": ["{effort} effort", "{effort} efor"],
  "schedules.off": ["off", "kapalı"],
  "schedules.never": ["never", "hiç"],
  "schedules.taskN": ["task #{id}", "görev #{id}"],
  "schedules.on": ["{name} is on", "{name} açık"],
  "schedules.offToast": ["{name} is off: it fires no more", "{name} kapalı: artık tetiklenmez"],
  "schedules.deleted": ["Schedule {name} deleted", "{name} zamanlaması silindi"],
});

/** The fields of the task a fire makes, as the form names them ("task.title", ...). */
const TASK_KEYS = ["task.title", "task.description", "task.type", "task.priority", "task.agent", "task.model",
  "task.effort"];
/** The id of the list of time zones the time zone field offers. */
const ZONES_ID = "schedule-zones";

/** This browser's IANA time zone: what a new schedule starts with. */
const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

/** The form's fields; the lists of values and lengths from the server's Schedule schema (but
 * the agent's null, which is the "not set" option: the project's agent). */
const specs = (projectId) => [...schemaSpecs("Schedule", [
  { key: "name", kind: "text", required: true, label: () => t("schedules.name") },
  { key: "cron", kind: "text", required: true, label: () => t("schedules.cron"), help: () => t("schedules.cron.help"),
    attrs: { class: "mono", placeholder: "0 3 * * *", spellcheck: "false" } },
  { key: "timezone", kind: "text", required: true, label: () => t("schedules.timezone"),
    help: () => t("schedules.timezone.help", { zone: browserZone() }), attrs: { list: ZONES_ID, spellcheck: "false" } },
  { key: "mode", kind: "select", optionLabel: (v) => t(`schedules.mode.${v}`), label: () => t("schedules.mode"),
    help: () => t("schedules.mode.help") },
  { key: "enabled", kind: "bool", label: () => t("schedules.enabled") },
  { key: "task.title", kind: "text", required: true, label: () => t("schedules.task.title") },
  { key: "task.description", kind: "textarea", label: () => t("schedules.task.description"),
    help: () => t("schedules.task.description.help"), attrs: { rows: 4 } },
  { key: "task.type", kind: "select", nullable: true, optionLabel: (v) => t(`type.${v}`),
    label: () => t("schedules.task.type") },
  { key: "task.agent", kind: "select", nullable: true, optionLabel: agentName, unsetLabel: () => projectsLabel(projectId),
    label: () => t("schedules.task.agent") },
  { key: "task.model", kind: "select", nullable: true, optionLabel: (v) => t(`model.${v}`),
    label: () => t("schedules.task.model") },
  { key: "task.effort", kind: "select", nullable: true, optionLabel: (v) => t(`effort.${v}`),
    label: () => t("schedules.task.effort") },
]).map((spec) => (spec.key === "task.agent" ? { ...spec, options: spec.options.filter((v) => v !== null) } : spec)), { key: "task.priority", kind: "select", nullable: true, options: integersOf("Schedule", "task.priority"),
  optionLabel: (v) => t(`priority.${v}`), label: () => t("schedules.task.priority") }];

/** What a new schedule starts with: the server's defaults, and this browser's time zone. */
const newSchedule = () => ({ mode: defaultOf("Schedule", "mode"), enabled: defaultOf("Schedule", "enabled"),
  timezone: browserZone() });

/** A schedule's values as the form names them: its task's fields are "task.<name>". */
const formValues = (schedule) => ({ ...schedule,
  ...Object.fromEntries(TASK_KEYS.map((key) => [key, schedule.task?.[key.slice(5)] ?? null])) });

/**
 * Put the form's task fields into body.task, whole (a PUT replaces the task): a field the
 * form does not show stays as it was; an empty one is left out.
 */
function nestTask(schedule, kit, body) {
  if (!TASK_KEYS.some((key) => key in body)) return;  // an edit that leaves the task alone
  const all = kit.collect().body;
  const task = { ...(schedule?.task || {}) };
  for (const key of TASK_KEYS) {
    const name = key.slice(5);
    const value = all[key];
    if (value === null || value === undefined || value === "") delete task[name];
    else task[name] = name === "priority" ? Number(value) : value;
    delete body[key];
  }
  body.task = task;
}

/** The IANA time zones this browser knows, offered by the time zone field. */
function zoneList() {
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  return h("datalist", { id: ZONES_ID }, zones.map((zone) => h("option", { value: zone })));
}

/** The form's rows. */
function build(kit) {
  return [h("div", { class: "form-row" }, kit.row("name"), kit.row("enabled")),
    h("div", { class: "form-row" }, kit.row("cron"), kit.row("timezone")), zoneList(),
    kit.row("mode"),
    h("fieldset", { class: "group schedule-task" }, h("legend", {}, t("schedules.task")),
      kit.row("task.title"), kit.row("task.description"),
      h("div", { class: "form-row" }, kit.row("task.type"), kit.row("task.priority")),
      h("div", { class: "form-row" }, kit.row("task.agent"), kit.row("task.model"), kit.row("task.effort")))];
}

/** "12 Nov 03:00 Europe/Istanbul (in 5 hr)": in the time zone its cron is read in, named
 * (this browser's time, unnamed, when the schedule has none this browser knows). */
function when(iso, zone) {
  const time = zone ? dateTime(iso, zone) : "";
  return time ? t("schedules.atZone", { time, zone, relative: relative(iso) })
    : t("schedules.at", { time: dateTime(iso), relative: relative(iso) });
}

/** "DEMO-4 Check the dependencies": how a task is named. */
const taskLabel = (task) => `${task.task_key} ${task.title}`;

/** The link to the task a schedule made (or sent to) last: its key and title once they are known. */
function lastTask(schedule, page) {
  const id = schedule.lastTaskId;
  const known = page.taskLabels.get(id) || (state.tasks.has(id) ? taskLabel(state.tasks.get(id)) : null);
  return h("a", { href: `#/tasks/${id}`, "data-testid": "schedule-last-task" }, known || t("schedules.taskN", { id }));
}

/** A row of a schedule's facts: [i18n key of the label, value, data-testid of the value]. */
const fact = ([key, value, testid]) => [h("dt", {}, t(key)), h("dd", { "data-testid": testid }, value)];

/** One listed schedule: its switch saves at once. */
function item(schedule, page) {
  const task = schedule.task || {};
  const toggle = (box) => saveEnabled(page, page.projectId, "schedules", schedule, box,
    (saved) => t(saved.enabled ? "schedules.on" : "schedules.offToast", { name: saved.name }));
  const remove = () => page.store.remove(schedule, schedule.name, t("schedules.deleted", { name: schedule.name }));
  const extras = [task.type && t(`type.${task.type}`), Number.isInteger(task.priority) && t(`priority.${task.priority}`),
    task.agent && agentName(task.agent), task.model && t(`model.${task.model}`),
    task.effort && t("schedules.effortChip", { effort: t(`effort.${task.effort}`) })].filter(Boolean);
  return h("article", { class: `item card-panel schedule${schedule.enabled ? "" : " disabled"}`,
    "data-schedule": String(schedule.id), "aria-labelledby": `schedule-name-${schedule.id}` },
  h("header", { class: "item-head" },
    h("h3", { id: `schedule-name-${schedule.id}` }, schedule.name),
    enabledSwitch(schedule, "schedules", toggle),
    itemActions(schedule, page.openForm, remove)),
  h("dl", { class: "field-list schedule-facts" }, [
    ["schedules.when", [h("code", { "data-testid": "schedule-cron" }, schedule.cron), " ",
      h("span", { class: "muted", "data-testid": "schedule-timezone" }, schedule.timezone)], "schedule-when"],
    ["schedules.makes", [`${t(`schedules.mode.${schedule.mode}`)}: `, h("strong", {}, task.title || ""),
      extras.length ? [" ", h("span", { class: "chips" }, extras.map((text) => h("span", { class: "chip static" }, text)))] : null],
    "schedule-makes"],
    ["schedules.next", schedule.nextAt ? h("time", { datetime: schedule.nextAt }, when(schedule.nextAt, schedule.timezone)) : t("schedules.off"),
      "schedule-next"],
    ["schedules.last", schedule.lastAt ? [h("time", { datetime: schedule.lastAt }, when(schedule.lastAt, schedule.timezone)),
      schedule.lastTaskId ? [" — ", lastTask(schedule, page)] : null] : t("schedules.never"), "schedule-last"],
  ].map(fact)),
  schedule.lastError ? h("p", { class: "alert alert-error schedule-error", role: "status", "data-testid": "schedule-error" },
    schedule.lastError) : null);
}

/**
 * @param {HTMLElement} root
 * @param {{projectId: number}} params
 */
export function mount(root, { projectId }) {
  const page = mountItemList(root, {
    projectId, kind: "schedules", prefix: "schedule", wide: true, specs: () => specs(projectId), blank: newSchedule(), values: formValues,
    build, item, beforeSave: nestTask, onChange: () => learnTasks(),
    order: () => [...page.store.items.values()].sort((a, b) => a.name.localeCompare(b.name) || a.id - b.id),
  });
  page.taskLabels = new Map();  // task id -> its key and title, for the last tasks the store lacks
  const asked = new Set();
  /** Read each last task the board does not know yet, once, for its key and title (called once the list is read). */
  function learnTasks() {
    for (const { lastTaskId: id } of page.store.items.values()) {
      if (!id || asked.has(id) || page.taskLabels.has(id) || state.tasks.has(id)) continue;
      asked.add(id);
      api.task(id).then((task) => {
        page.taskLabels.set(id, taskLabel(task));
        page.renderList();
      }).catch(() => {});  // deleted since: the link says its id
    }
  }
  // how far the next and last fires are changes with the clock
  const timer = setInterval(() => page.renderList(), 30000);
  // the last task's key and title, once the board knows the task (or it is renamed)
  const offEvent = onEvent(({ event, data }) => {
    if (event !== "task:created" && event !== "task:updated") return;
    if (data.project_id !== projectId || page.taskLabels.get(data.id) === taskLabel(data)) return;
    page.taskLabels.set(data.id, taskLabel(data));  // a fire's task:created comes before its schedule:fired
    if ([...page.store.items.values()].some((schedule) => schedule.lastTaskId === data.id)) page.renderList();
  });
  return () => {
    clearInterval(timer);
    offEvent();
    page.unmount();
  };
}
