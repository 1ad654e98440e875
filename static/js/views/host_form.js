// The add/edit dialog of a host (Settings → Hosts). The fields' limits and patterns come from
// the server's API description (api_create_host_body); the agent commands are a field of
// their own: one command per agent CLI, empty = the CLI's name on the host's login PATH.

import { h, toast } from "../dom.js";
import { register, t } from "../i18n.js";
import { defaultOf, enumOf, rangeOf } from "../schema.js";
import { api, putHost } from "../store.js";
import { agentName } from "./common.js";
import { formDialog, formKit, liveForm, schemaSpecs } from "./form_kit.js";

register({  // key: [English, Turkish]
  "hostform.newTitle": ["Add a host", "Makine ekle"],
  "hostform.editTitle": ["Edit host", "Makineyi düzenle"],
  "hostform.name": ["Name", "Ad"],
  "hostform.name.help": ["What the board calls it; unique.", "Panonun ona verdiği ad; benzersiz."],
  "hostform.address": ["Address", "Adres"],
  "hostform.address.help": ["user@host, or a Host alias of your ~/.ssh/config.", "kullanıcı@makine ya da ~/.ssh/config dosyanızdaki bir Host takma adı."],
  "hostform.address.bad": ["Write user@host or an alias of ~/.ssh/config: a user name, @, then a host name or IP address (an IPv6 one in [ ]), without spaces.", "kullanıcı@makine ya da ~/.ssh/config'deki bir takma ad yazın: bir kullanıcı adı, @, ardından bir makine adı ya da IP adresi (IPv6 ise [ ] içinde), boşluksuz."],
  "hostform.port": ["SSH port", "SSH portu"],
  "hostform.port.help": ["{min} to {max}; 22 leaves it to ~/.ssh/config.", "{min} ile {max} arası; 22, portu ~/.ssh/config'e bırakır."],
  "hostform.identityFile": ["Key file", "Anahtar dosyası"],
  "hostform.identityFile.help": ["A private key on the board's machine (absolute or ~/…). Empty: ssh's own choice (your ssh agent, ~/.ssh/config).", "Panonun makinesindeki bir özel anahtar (mutlak ya da ~/…). Boş: ssh'nin kendi seçimi (ssh ajanınız, ~/.ssh/config)."],
  "hostform.baseDir": ["Folder on the host", "Makinedeki klasör"],
  "hostform.baseDir.help": ["Where the board keeps its clones, worktrees and attachments there.", "Panonun oradaki kopyalarını, çalışma ağaçlarını ve eklerini tuttuğu yer."],
  "hostform.baseDir.bad": ["An absolute path or one starting with ~/, of plain names, without ..", "Mutlak ya da ~/ ile başlayan, düz adlardan oluşan, .. içermeyen bir yol."],
  "hostform.maxConcurrent": ["Agents at once", "Aynı anda çalışan ajan"],
  "hostform.maxConcurrent.help": ["{min} to {max}, across its projects; each project's own limit holds too.", "{min} ile {max} arası, tüm projelerinde; her projenin kendi sınırı da geçerlidir."],
  "hostform.enabled": ["Enabled: its projects' tasks run there", "Etkin: projelerinin görevleri orada çalışır"],
  "hostform.agentCommands": ["Agent commands on the host", "Makinedeki ajan komutları"],
  "hostform.agentCommands.help": ["Empty: the CLI's name, found on the host's login PATH. Fill in a full path when it is elsewhere.", "Boş: CLI'nin adı, makinenin oturum PATH'inde aranır. Başka bir yerdeyse tam yolunu yazın."],
});

const lbl = (key) => () => t(key);
const limitsHelp = (key, field) => () => t(key, rangeOf("Host", field));
const clis = () => enumOf("Project", "agent");

/** The agentCommands field: a labelled input per agent CLI (form_kit's custom field). */
const agentCommandsField = {
  toRaw: (value) => Object.fromEntries(clis().map((cli) => [cli, typeof value?.[cli] === "string" ? value[cli] : ""])),
  fromRaw(raw) {
    const filled = Object.entries(raw).map(([cli, command]) => [cli, command.trim()]).filter(([, command]) => command);
    return { value: filled.length ? Object.fromEntries(filled) : null };
  },
  render(spec, raw, ids, changed) {
    const controls = clis().map((cli) => {
      const input = h("input", { type: "text", class: "mono", value: raw[spec.key][cli], placeholder: cli,
        autocomplete: "off", spellcheck: "false", "data-key": `${spec.key}:${cli}`, "aria-label": agentName(cli) });
      input.addEventListener("input", () => { raw[spec.key][cli] = input.value; changed(); });
      return input;
    });
    const element = h("fieldset", { class: "field agent-commands", "data-field": spec.key, "aria-describedby": ids.described },
      h("legend", {}, spec.label()),
      h("div", { class: "command-grid" }, controls.map((input, i) => [h("span", {}, agentName(clis()[i])), input])),
      ids.help, ids.error);
    return { element, controls };
  },
  show(parts, raw) {
    for (const input of parts.controls) input.value = raw[input.dataset.key.split(":")[1]] ?? "";
  },
};

/** The form's fields, completed from the server's schema of a host's body. */
const specs = () => schemaSpecs("api_create_host_body", [
  { key: "name", kind: "text", required: true, label: lbl("hostform.name"), help: lbl("hostform.name.help") },
  { key: "address", kind: "text", required: true, patternKey: "hostform.address.bad", label: lbl("hostform.address"),
    help: lbl("hostform.address.help"), attrs: { class: "mono", placeholder: "me@vm.example", autocapitalize: "none", spellcheck: "false" } },
  { key: "port", kind: "int", label: lbl("hostform.port"), help: limitsHelp("hostform.port.help", "port") },
  { key: "identityFile", kind: "text", nullable: true, label: lbl("hostform.identityFile"), help: lbl("hostform.identityFile.help"),
    attrs: { class: "mono", placeholder: "~/.ssh/id_ed25519", spellcheck: "false" } },
  { key: "baseDir", kind: "text", required: true, patternKey: "hostform.baseDir.bad", label: lbl("hostform.baseDir"),
    help: lbl("hostform.baseDir.help"), attrs: { class: "mono", spellcheck: "false" } },
  { key: "maxConcurrent", kind: "int", label: lbl("hostform.maxConcurrent"),
    help: limitsHelp("hostform.maxConcurrent.help", "maxConcurrent") },
  { key: "enabled", kind: "bool", label: lbl("hostform.enabled") },
  { key: "agentCommands", kind: "custom", custom: agentCommandsField, label: lbl("hostform.agentCommands"),
    help: lbl("hostform.agentCommands.help") },
]);

/** What a new host starts with: the server's defaults. */
const newHost = () => Object.fromEntries(["port", "baseDir", "maxConcurrent", "enabled"]
  .map((key) => [key, defaultOf("Host", key)]));

/**
 * Add a host (host null) or edit one, in a dialog; a new host is saved and the list shows it.
 * @param {Object|null} host
 */
export function openHostForm(host) {
  const kit = formKit(specs(), host || newHost());
  let dialog = null;
  const form = liveForm({
    kit, onlyDirty: Boolean(host),
    build: () => [h("div", { class: "form-row" }, kit.row("name"), kit.row("enabled")),
      h("div", { class: "form-row" }, kit.row("address"), kit.row("port")),
      kit.row("identityFile"), kit.row("baseDir"), kit.row("maxConcurrent"), kit.row("agentCommands")],
    submitLabel: () => t(host ? "common.save" : "common.create"),
    onCancel: () => dialog.close(),
    onSubmit: async (body) => {
      if (host && !Object.keys(body).length) {
        dialog.close();
        return;
      }
      putHost(host ? await api.updateHost(host.id, body) : await api.createHost(body));
      dialog.close();
      toast(t("common.saved"));
    },
  });
  dialog = formDialog(() => t(host ? "hostform.editTitle" : "hostform.newTitle"), form, { wide: true });
}
