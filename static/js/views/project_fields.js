// The fields of a project, as the project form shows them: their groups, labels, help and
// messages. Their values, limits and patterns come from the server's API description
// (components.schemas.Project); the board adds only how to show and explain them. "Runs on"
// (host) is a select of this machine and the hosts of Settings → Hosts.

import { h } from "../dom.js";
import { register, t } from "../i18n.js";
import { patternOf, rangeOf } from "../schema.js";
import { state } from "../store.js";
import { hostName, select } from "./common.js";
import { schemaSpecs } from "./form_kit.js";

register({  // key: [English, Turkish]
  "pform.group.basic": ["Basic", "Temel"],
  "pform.group.queue": ["Queue", "Kuyruk"],
  "pform.group.git": ["Git", "Git"],
  "pform.group.autoTest": ["Automatic testing", "Otomatik test"],
  "pform.group.retry": ["Retries and limits", "Yeniden denemeler ve sınırlar"],
  "pform.group.attempts": ["Several agents on one task", "Bir görevde birkaç ajan"],
  "pform.group.attempts.help": ["A task you run with several agents at once (its page's “Run with several agents”): each works on a branch of its own, and one attempt is picked.", "Birkaç ajanla aynı anda çalıştırdığınız bir görev (sayfasındaki “Birkaç ajanla çalıştır”): her biri kendi dalında çalışır ve bir deneme seçilir."],
  "pform.group.runsOn": ["Where tasks run", "Görevlerin çalıştığı yer"],
  "pform.group.sandbox": ["Sandbox", "Korumalı alan"],
  "pform.group.preview": ["Preview", "Önizleme"],
  "pform.previewCommand": ["Preview command", "Önizleme komutu"],
  "pform.previewCommand.help": ["Serves the task's checkout on 127.0.0.1:$PORT, for the Preview of a task in progress or testing (e.g. npm run dev -- --port $PORT --host 127.0.0.1). It runs in the project's sandbox and network policy. Empty = no preview.", "Devam eden ya da testteki bir görevin Önizlemesi için görevin çalışma kopyasını 127.0.0.1:$PORT üzerinde sunar (ör. npm run dev -- --port $PORT --host 127.0.0.1). Projenin korumalı alanında ve ağ ilkesiyle çalışır. Boş = önizleme yok."],
  "pform.previewPath": ["Preview opens at", "Önizleme şurada açılır"],
  "pform.previewPath.help": ["A path starting with /.", "/ ile başlayan bir yol."],
  "pform.sandbox": ["Run agents in the sandbox", "Ajanları korumalı alanda çalıştır"],
  "pform.sandbox.help": ["Each run of the agent (task, verifier, planner) goes through bubblewrap: it sees your files read-only, never the board's data, your SSH keys, credentials, browser profiles or other projects, and writes only its checkout, its CLI's state and ~/.cache.", "Ajanın her çalışması (görev, doğrulayıcı, planlayıcı) bubblewrap'ten geçer: dosyalarınızı salt okunur görür; panonun verilerini, SSH anahtarlarınızı, kimlik bilgilerinizi, tarayıcı profillerinizi ve diğer projeleri hiç görmez; yalnızca kendi çalışma kopyasına, CLI'sinin durumuna ve ~/.cache'e yazar."],
  "pform.sandbox.auto": ["Automatic: wherever bubblewrap works", "Otomatik: bubblewrap'in çalıştığı her yerde"],
  "pform.sandbox.bubblewrap": ["Always: a task waits while bubblewrap cannot work", "Her zaman: bubblewrap çalışamazken görev bekler"],
  "pform.sandbox.none": ["Never: the agent runs with the board's rights", "Asla: ajan panonun haklarıyla çalışır"],
  "pform.sandbox.works": ["Here bubblewrap {version} works.", "Burada bubblewrap {version} çalışıyor."],
  "pform.sandbox.broken": ["Here bubblewrap does not work ({error}): automatic runs unsandboxed.", "Burada bubblewrap çalışmıyor ({error}): otomatik, korumasız çalışır."],
  "pform.sandbox.host": ["On a host, bubblewrap runs there: its check in Settings → Hosts says whether it works.", "Bir makinede bubblewrap orada çalışır: çalışıp çalışmadığını Ayarlar → Makineler'deki denetimi söyler."],
  "pform.sandbox.risk": ["Auto-accept without a sandbox: an agent that follows someone else's instructions (an issue, a review comment, CI output) can read your keys and the board's token.", "Korumalı alan olmadan otomatik kabul: başkasının talimatlarını (bir konu, bir inceleme yorumu, CI çıktısı) izleyen bir ajan anahtarlarınızı ve panonun belirtecini okuyabilir."],
  "pform.sandboxPaths.readOnly": ["Also readable in the sandbox", "Korumalı alanda ayrıca okunabilir"],
  "pform.sandboxPaths.readWrite": ["Also writable in the sandbox", "Korumalı alanda ayrıca yazılabilir"],
  "pform.sandboxPaths.help": ["Absolute paths, one per line. Never the board's data dir, ~/.ssh or another credential store.", "Mutlak yollar, her satıra bir tane. Panonun veri dizini, ~/.ssh ya da başka bir kimlik bilgisi deposu asla."],
  "pform.network": ["Network of sandboxed runs", "Korumalı çalışmaların ağı"],
  "pform.network.help": ["A sandboxed run has a network of its own: its only way out is the board's proxy, which lets it reach what this says. Its agent CLI's API is always reached (except with Nothing). Loopback and private addresses only when listed exactly (127.0.0.1:5432). Every refused connection is on the task's log. Unsandboxed runs have no policy.", "Korumalı bir çalışmanın kendine ait bir ağı vardır: tek çıkışı panonun vekil sunucusudur ve yalnızca buradakine ulaştırır. Ajan CLI'sinin API'sine her zaman ulaşılır (Hiçbir şey dışında). Geri döngü ve özel adreslere yalnızca tam olarak listelendiğinde (127.0.0.1:5432). Reddedilen her bağlantı görevin günlüğündedir. Korumasız çalışmaların politikası yoktur."],
  "pform.network.open": ["Any host", "Herhangi bir makine"],
  "pform.network.allowlist": ["Only the hosts listed below and the agent's API", "Yalnızca aşağıda listelenen makineler ve ajanın API'si"],
  "pform.network.none": ["Nothing: for local models or offline work (a CLI that needs its API cannot run)", "Hiçbir şey: yerel modeller ya da çevrimdışı iş için (API'sine ihtiyaç duyan bir CLI çalışamaz)"],
  "pform.networkAllow": ["Hosts sandboxed runs may reach", "Korumalı çalışmaların ulaşabileceği makineler"],
  "pform.networkAllow.help": ["One per line: example.com, *.example.com (any name under it), host:port, an IP address.", "Her satıra bir tane: example.com, *.example.com (altındaki her ad), makine:port, bir IP adresi."],
  "pform.host": ["Runs on", "Çalıştığı yer"],
  "pform.host.help": ["This machine, or another one the board reaches over SSH: its tasks and their git work run there.", "Bu makine ya da panonun SSH ile ulaştığı başka bir makine: görevleri ve git işleri orada çalışır."],
  "pform.host.local": ["This machine", "Bu makine"],
  "pform.host.disabled": ["{name} (disabled)", "{name} (devre dışı)"],
  "pform.host.manage": ["Settings → Hosts", "Ayarlar → Makineler"],
  "pform.repoUrl": ["Repository the host clones", "Makinenin kopyaladığı depo"],
  "pform.repoUrl.help": ["A git URL the host can reach (a private repository needs the host's own credentials). Empty: the origin of the working directory.", "Makinenin ulaşabildiği bir git URL'si (özel bir depo makinenin kendi kimlik bilgilerini ister). Boş: çalışma dizininin origin'i."],
  "pform.repoUrl.bad": ["A git URL or path, without spaces, not starting with -.", "Boşluk içermeyen, - ile başlamayan bir git URL'si ya da yolu."],
  "pform.name": ["Name", "Ad"],
  "pform.slug": ["Slug", "Kısa ad"],
  "pform.slug.help": ["Lowercase letters, digits and dashes; unique. Task keys are made from it once.", "Küçük harf, rakam ve tire; benzersiz. Görev anahtarları bir kez bundan üretilir."],
  "pform.slug.bad": ["Use lowercase letters, digits and dashes, starting with a letter or digit.", "Harf veya rakamla başlayan küçük harf, rakam ve tire kullanın."],
  "pform.workingDir": ["Working directory", "Çalışma dizini"],
  "pform.workingDir.help": ["Absolute path of an existing directory: the code the agents work on.", "Var olan bir dizinin mutlak yolu: ajanların üzerinde çalıştığı kod."],
  "pform.icon": ["Icon", "Simge"],
  "pform.icon.help": ["An emoji or one or two letters; empty shows the first letter of the name.", "Bir emoji ya da bir iki harf; boşsa adın ilk harfi gösterilir."],
  "pform.icon.preview": ["shows as", "görünüşü"],
  "pform.iconSeed": ["Icon seed", "Simge tohumu"],
  "pform.iconSeed.help": ["Any text; picks the colour of the icon.", "Herhangi bir metin; simgenin rengini seçer."],
  "pform.agent": ["Agent", "Ajan"],
  "pform.agent.help": ["The agent CLI its tasks run; a task can choose another one.", "Görevlerinin çalıştırdığı ajan CLI'si; bir görev başka birini seçebilir."],
  "pform.permissionMode": ["Permission mode", "İzin kipi"],
  "pform.permissionMode.help": ["Auto-accept: every tool runs without asking. Allow listed tools: the tools of the list below run without asking; for any other the agent asks you. Default: the agent asks you before each edit or command its own rules do not allow. It asks on the task page (also shown on its card and in “Needs you”). Agents other than Claude Code cannot ask: what would need your answer is refused.", "Otomatik kabul: her araç sormadan çalışır. Listelenen araçlara izin ver: aşağıdaki listedeki araçlar sormadan çalışır; diğerleri için ajan size sorar. Varsayılan: ajan, kendi kurallarının izin vermediği her düzenlemeden ya da komuttan önce size sorar. Görev sayfasında sorar (kartında ve “Sizi bekliyor”da da görünür). Claude Code dışındaki ajanlar soramaz: cevabınızı gerektirecek olan reddedilir."],
  "pform.perm.auto-accept": ["Auto-accept (skip permission prompts)", "Otomatik kabul (izin sorma)"],
  "pform.perm.allow-tools": ["Allow listed tools", "Listelenen araçlara izin ver"],
  "pform.perm.default": ["Default (the agent's own rules)", "Varsayılan (ajanın kendi kuralları)"],
  "pform.approvalTimeoutMinutes": ["Deny an unanswered approval after (minutes)", "Yanıtlanmayan onayı şu süreden sonra reddet (dakika)"],
  "pform.approvalTimeoutMinutes.help": ["{min} to {max}; 0 = wait for your answer however long it takes.", "{min} ile {max} arası; 0 = ne kadar sürerse sürsün yanıtınızı bekle."],
  "pform.allowedTools": ["Allowed tools", "İzin verilen araçlar"],
  "pform.allowedTools.help": ["Comma-separated tool names, e.g. Read,Edit,Bash(git:*)", "Virgülle ayrılmış araç adları, ör. Read,Edit,Bash(git:*)"],
  "pform.autoQueue": ["Start queued tasks automatically", "Kuyruktaki görevleri otomatik başlat"],
  "pform.autoQueue.help": ["Ready backlog tasks start, in order, whenever a slot is free.", "Hazır bekleyen görevler, boş yer açıldıkça sırayla başlar."],
  "pform.maxConcurrent": ["Agents at once", "Aynı anda çalışan ajan"],
  "pform.maxConcurrent.help": ["{min} to {max}.", "{min} ile {max} arası."],
  "pform.shareWarning": ["Agents share one checkout: with more than one agent at once and no branch per task, they edit the same files. Turn on “Branch and worktree per task”.", "Ajanlar tek bir çalışma kopyasını paylaşıyor: birden fazla ajan aynı anda çalışırken görev başına dal yoksa aynı dosyaları düzenlerler. “Görev başına dal ve çalışma ağacı” seçeneğini açın."],
  "pform.autoBranch": ["Branch and worktree per task", "Görev başına dal ve çalışma ağacı"],
  "pform.autoBranch.help": ["Each task works in its own git worktree on its own branch; your checkout is never touched.", "Her görev kendi dalında, kendi git çalışma ağacında çalışır; sizin kopyanıza dokunulmaz."],
  "pform.autoBranch.create": ["On unless you turn it off: your checked-out branch and your files stay as they are, and agents working at once never share one checkout. Off, the agent edits (and may commit) in the folder itself, on the branch checked out there.", "Siz kapatmadıkça açık: kullandığınız dal ve dosyalarınız olduğu gibi kalır, aynı anda çalışan ajanlar tek bir çalışma kopyasını paylaşmaz. Kapalıyken ajan klasörün kendisinde, orada kullanılan dalda düzenleme (ve belki commit) yapar."],
  "pform.autoBranch.noGit": ["No branch per task here: this folder {why}. Tasks will run in the folder itself; run git init and commit once there to get a branch per task.", "Burada görev başına dal yok: bu klasör {why}. Görevler klasörün kendisinde çalışır; görev başına dal için orada git init yapıp bir kez commit edin."],
  "pform.autoBranch.noGit.notRepo": ["is not a git repository", "bir git deposu değil"],
  "pform.autoBranch.noGit.noCommit": ["has no commit yet", "henüz commit içermiyor"],
  "pform.autoBranch.onHost": ["Always on for a project on another machine.", "Başka bir makinedeki projede her zaman açık."],
  "pform.autoPr": ["Open a pull request when a task is done", "Görev bitince çekme isteği aç"],
  "pform.autoPr.help": ["The branch is pushed and a pull request opened on the repository below; the board follows it until it is merged: failing checks, requested changes and conflicts go back to the agent.", "Dal gönderilir ve aşağıdaki depoda bir çekme isteği açılır; pano onu birleştirilene dek izler: başarısız denetimler, istenen değişiklikler ve çakışmalar ajana geri gönderilir."],
  "pform.tokenMissing": ["The board has no source-host token: pull requests and issue sync need TASKBOARD_GIT_HOST_TOKEN (or GITHUB_TOKEN) in its environment.", "Panonun kaynak barındırma belirteci yok: çekme istekleri ve konu eşitleme, ortamında TASKBOARD_GIT_HOST_TOKEN (ya da GITHUB_TOKEN) ister."],
  "pform.prPollSeconds": ["Look at open pull requests every (seconds)", "Açık çekme isteklerine bakma aralığı (saniye)"],
  "pform.prPollSeconds.help": ["{min} to {max}. A webhook from the source host (Settings) makes it immediate.", "{min} ile {max} arası. Kaynak barındırmadan gelen bir web kancası (Ayarlar) bunu anında yapar."],
  "pform.prFixMaxAttempts": ["Automatic fixes per pull request", "Çekme isteği başına otomatik düzeltme"],
  "pform.prTrustedAuthors": ["Trusted authors", "Güvenilen yazarlar"],
  "pform.prTrustedAuthors.help": ["Source-host logins, separated by commas or spaces, whose reviews and comments go back to the agent by themselves, besides the repository's owners, members and collaborators. Everyone else's wait on the task page for you.", "Deponun sahipleri, üyeleri ve katkıcıları dışında, incelemeleri ve yorumları ajana kendiliğinden giden kaynak sunucu kullanıcı adları (virgül ya da boşlukla ayrılmış). Diğer herkesinkiler görev sayfasında sizi bekler."],
  "pform.prFixMaxAttempts.help": ["{min} to {max}. Failing checks, requested changes and conflicts are sent back to the agent at most this many times; then the task waits for you.", "{min} ile {max} arası. Başarısız denetimler, istenen değişiklikler ve çakışmalar ajana en fazla bu kadar kez geri gönderilir; sonra görev sizi bekler."],
  "pform.prBaseBranch": ["Base branch", "Temel dal"],
  "pform.prBaseBranch.bad": ["Not a valid git branch name.", "Geçerli bir git dal adı değil."],
  "pform.autoTest": ["Verify finished work automatically", "Biten işi otomatik doğrula"],
  "pform.autoTest.help": ["A read-only verifier run approves (→ Done) or sends feedback back to the agent.", "Salt okunur bir doğrulayıcı işi onaylar (→ Tamamlandı) ya da geri bildirimi ajana geri gönderir."],
  "pform.testPrompt": ["Verifier instructions", "Doğrulayıcı talimatları"],
  "pform.stopCheckCommand": ["Check command", "Denetim komutu"],
  "pform.stopCheckCommand.help": ["Runs in the task's checkout when the agent tries to finish (e.g. pytest -q): while it fails, the agent is sent back to work. It is also the “Check” of each attempt of a task run by several agents. Empty = off.", "Ajan bitirmeye çalıştığında görevin çalışma kopyasında çalışır (ör. pytest -q): başarısız oldukça ajan işe geri gönderilir. Birkaç ajanla çalışan bir görevin her denemesinin “Denetim”i de budur. Boş = kapalı."],
  "pform.stopCheckMaxBlocks": ["Times a failing check sends the agent back", "Başarısız denetimin ajanı geri gönderme sayısı"],
  "pform.stopCheckMaxBlocks.help": ["{min} to {max}; then the agent may finish.", "{min} ile {max} arası; sonra ajan bitirebilir."],
  "pform.attemptPick": ["Which attempt is picked", "Hangi deneme seçilir"],
  "pform.attemptPick.manual": ["You pick one, after comparing them", "Karşılaştırdıktan sonra siz seçersiniz"],
  "pform.attemptPick.auto": ["Picked automatically when the last one ends", "Sonuncusu bitince otomatik seçilir"],
  "pform.attemptPick.help": ["Automatically: the one whose check passed, then the one the verifier approved, then the cheapest, then the fastest.", "Otomatik: denetimi geçen, sonra doğrulayıcının onayladığı, sonra en ucuz, sonra en hızlı olan."],
  "pform.keepAttemptBranches": ["Keep the branches of the attempts not picked", "Seçilmeyen denemelerin dallarını sakla"],
  "pform.keepAttemptBranches.help": ["Their worktrees are removed anyway; without this their branches go too.", "Çalışma ağaçları yine de silinir; bu kapalıysa dalları da silinir."],
  "pform.maxRetries": ["Retries", "Yeniden deneme"],
  "pform.maxRetries.help": ["{min} to {max}; a crashed or timed-out run is retried this many times.", "{min} ile {max} arası; çöken ya da zaman aşımına uğrayan çalışma bu kadar kez yeniden denenir."],
  "pform.taskTimeoutMinutes": ["Timeout (minutes)", "Zaman aşımı (dakika)"],
  "pform.taskTimeoutMinutes.help": ["{min} to {max}; 0 or empty = no timeout.", "{min} ile {max} arası; 0 ya da boş = zaman aşımı yok."],
  "pform.taskBudgetUsd": ["Budget per task (USD)", "Görev başına bütçe (USD)"],
  "pform.taskBudgetUsd.help": ["Empty = no budget.", "Boş = bütçe yok."],
  "pform.gitHostRepo": ["Repository", "Depo"],
  "pform.gitHostRepo.help": ["owner/repo on the source host; used for pull requests and issue sync.", "Kaynak barındırmadaki sahip/depo; çekme istekleri ve konu eşitleme için."],
  "pform.gitHostRepo.bad": ["Write it as owner/repo.", "sahip/depo biçiminde yazın."],
  "pform.gitHostSyncEnabled": ["Import open issues as backlog tasks", "Açık konuları bekleyen görev olarak içe aktar"],
  "pform.gitHostSyncEnabled.help": ["Every 5 minutes. An imported task never starts until a person moves or edits it.", "5 dakikada bir. İçe aktarılan görev, biri onu taşıyana ya da düzenleyene dek başlamaz."],
  "pform.create": ["Create project", "Projeyi oluştur"],
});

const lbl = (key) => () => t(key);
/** A help text that names the field's limits ({min}, {max}) as the server sets them. */
const limitsHelp = (key, field) => () => t(key, rangeOf("Project", field));

/** The groups of the edit form, in order. */
export const GROUPS = ["basic", "queue", "runsOn", "sandbox", "git", "autoTest", "attempts", "preview", "retry"];
/** The fields asked for when a project is created. */
export const CREATE_KEYS = ["name", "slug", "workingDir", "agent", "permissionMode", "allowedTools", "icon", "iconSeed", "autoBranch"];

/** The pull request's help, and what it lacks while the board has no source-host token. */
const autoPrHelp = () => [t("pform.autoPr.help"), state.settings?.hasGitHostToken === false
  ? [" ", h("span", { class: "warn-text", "data-testid": "token-missing" }, t("pform.tokenMissing"))] : ""];

/**
 * Fill a "Runs on" select: this machine, then every host (the current one also while the
 * hosts are not loaded yet), keeping the value.
 * @param {HTMLSelectElement} el
 * @param {string} current  "" (this machine) or a host id
 */
export function fillHostSelect(el, current) {
  const ids = [...state.hosts.keys()].sort((a, b) => a - b).map(String);
  if (current !== "" && !ids.includes(current)) ids.push(current);
  const label = (v) => {
    if (v === "") return t("pform.host.local");
    const host = state.hosts.get(Number(v));
    return host && !host.enabled ? t("pform.host.disabled", { name: host.name }) : hostName(Number(v));
  };
  el.replaceChildren(...select(["", ...ids], current, label).children);
  el.value = current;
}

/** The host field: a select whose raw value is "" (null: this machine) or a host id. */
const hostField = {
  toRaw: (value) => (value === null || value === undefined ? "" : String(value)),
  fromRaw: (raw) => ({ value: raw === "" ? null : Number(raw) }),
  render(spec, raw, ids, changed) {
    const control = h("select", { id: ids.id, "data-key": spec.key, "aria-describedby": ids.described });
    fillHostSelect(control, raw[spec.key]);
    control.addEventListener("change", () => { raw[spec.key] = control.value; changed(); });
    const element = h("div", { class: "field", "data-field": spec.key },
      h("label", { for: ids.id }, spec.label()), control, ids.help, ids.error);
    return { element, controls: [control] };
  },
  show(parts, value) { fillHostSelect(parts.controls[0], value); },
};

/** What the sandbox does, and whether it works on this machine (GET /api/health). */
function sandboxHelp() {
  const said = [t("pform.sandbox.help")];
  const here = state.health?.sandbox;
  if (here?.works) said.push(t("pform.sandbox.works", { version: here.version || "" }));
  else if (here && here.works === false) said.push(t("pform.sandbox.broken", { error: here.error || "" }));
  if (state.hosts.size) said.push(t("pform.sandbox.host"));
  return said.join(" ");
}

/** sandboxPaths: a textarea of paths per side, {readOnly, readWrite} (null when both are empty). */
const sandboxPathsField = {
  toRaw: (value) => ({ readOnly: (value?.readOnly || []).join("\n"), readWrite: (value?.readWrite || []).join("\n") }),
  fromRaw: (raw) => {
    const lines = (text) => text.split("\n").map((line) => line.trim()).filter(Boolean);
    const value = { readOnly: lines(raw.readOnly), readWrite: lines(raw.readWrite) };
    return { value: value.readOnly.length || value.readWrite.length ? value : null };
  },
  render(spec, raw, ids, changed) {
    const controls = ["readOnly", "readWrite"].map((side) => {
      const control = h("textarea", { id: `${ids.id}-${side}`, class: "mono", rows: "2", spellcheck: "false",
        "data-key": `${spec.key}.${side}`, "aria-describedby": ids.described, placeholder: "/srv/shared" });
      control.value = raw[spec.key][side];
      control.addEventListener("input", () => { raw[spec.key] = { ...raw[spec.key], [side]: control.value }; changed(); });
      return control;
    });
    const element = h("div", { class: "field", "data-field": spec.key },
      ["readOnly", "readWrite"].map((side, n) => [
        h("label", { for: `${ids.id}-${side}` }, t(`pform.sandboxPaths.${side}`)), controls[n]]),
      ids.help, ids.error);
    return { element, controls };
  },
  show(parts, raw) { parts.controls[0].value = raw.readOnly; parts.controls[1].value = raw.readWrite; },
};

/**
 * A list of words in one control (an array for the server, null when empty): spaces and
 * commas part them; `join` writes them back; `control(attrs)` makes the textarea or input.
 */
const wordsField = (join, control) => ({
  toRaw: (value) => (value || []).join(join),
  fromRaw: (raw) => {
    const words = raw.split(/[\s,]+/).filter(Boolean);
    return { value: words.length ? words : null };
  },
  render(spec, raw, ids, changed) {
    const input = control({ id: ids.id, class: "mono", spellcheck: "false", autocapitalize: "none",
      "data-key": spec.key, "aria-describedby": ids.described });
    input.value = raw[spec.key];
    input.addEventListener("input", () => { raw[spec.key] = input.value; changed(); });
    const element = h("div", { class: "field", "data-field": spec.key },
      h("label", { for: ids.id }, spec.label()), input, ids.help, ids.error);
    return { element, controls: [input] };
  },
  show(parts, raw) { parts.controls[0].value = raw; },
});

/** networkAllow: host patterns, one per line. */
const hostsField = wordsField("\n", (attrs) => h("textarea", { ...attrs, rows: "3", placeholder: "*.example.com" }));

/** The trusted authors: logins in one line. */
const loginsField = wordsField(", ", (attrs) => h("input", { ...attrs, type: "text" }));

/**
 * Every project field in its group, completed from the server's schema (values, limits,
 * patterns, lengths). Built when a form opens: the API description is loaded by then.
 * @returns {import("./form_kit.js").Spec[]}
 */
export function projectSpecs() {
  return schemaSpecs("Project", [
    { key: "name", group: "basic", kind: "text", required: true, label: lbl("pform.name") },
    { key: "slug", group: "basic", kind: "text", required: true, label: lbl("pform.slug"), help: lbl("pform.slug.help"),
      patternKey: "pform.slug.bad", attrs: { autocapitalize: "none", spellcheck: "false" } },
    { key: "workingDir", group: "basic", kind: "text", required: true, label: lbl("pform.workingDir"),
      help: lbl("pform.workingDir.help"), attrs: { class: "mono", placeholder: "/home/me/code/project", spellcheck: "false" } },
    { key: "icon", group: "basic", kind: "text", nullable: true, label: lbl("pform.icon"), help: lbl("pform.icon.help") },
    { key: "iconSeed", group: "basic", kind: "text", nullable: true, label: lbl("pform.iconSeed"),
      help: lbl("pform.iconSeed.help") },
    { key: "agent", group: "basic", kind: "select", label: lbl("pform.agent"), help: lbl("pform.agent.help"),
      optionLabel: (v) => t(`agent.${v}`) },
    { key: "permissionMode", group: "basic", kind: "select", label: lbl("pform.permissionMode"),
      help: lbl("pform.permissionMode.help"), optionLabel: (v) => t(`pform.perm.${v}`) },
    { key: "allowedTools", group: "basic", kind: "text", nullable: true, label: lbl("pform.allowedTools"),
      help: lbl("pform.allowedTools.help"), attrs: { class: "mono", spellcheck: "false" } },
    { key: "approvalTimeoutMinutes", group: "basic", kind: "int", label: lbl("pform.approvalTimeoutMinutes"),
      help: limitsHelp("pform.approvalTimeoutMinutes.help", "approvalTimeoutMinutes") },
    { key: "autoQueue", group: "queue", kind: "bool", label: lbl("pform.autoQueue"), help: lbl("pform.autoQueue.help") },
    { key: "maxConcurrent", group: "queue", kind: "int", label: lbl("pform.maxConcurrent"),
      help: limitsHelp("pform.maxConcurrent.help", "maxConcurrent") },
    { key: "host", group: "runsOn", kind: "custom", custom: hostField, label: lbl("pform.host"),
      help: () => [t("pform.host.help"), " ", h("a", { href: "#/settings/hosts" }, t("pform.host.manage"))] },
    { key: "repoUrl", group: "runsOn", kind: "text", patternKey: "pform.repoUrl.bad", label: lbl("pform.repoUrl"),
      help: lbl("pform.repoUrl.help"), skip: (raw) => raw.host === "",
      attrs: { class: "mono", placeholder: "git@github.com:me/project.git", spellcheck: "false" } },
    { key: "sandbox", group: "sandbox", kind: "select", label: lbl("pform.sandbox"), help: sandboxHelp,
      optionLabel: (v) => t(`pform.sandbox.${v}`) },
    { key: "sandboxPaths", group: "sandbox", kind: "custom", custom: sandboxPathsField,
      label: lbl("pform.sandboxPaths.readOnly"), help: lbl("pform.sandboxPaths.help"), skip: (raw) => raw.sandbox === "none" },
    { key: "network", group: "sandbox", kind: "select", label: lbl("pform.network"), help: lbl("pform.network.help"),
      optionLabel: (v) => t(`pform.network.${v}`), skip: (raw) => raw.sandbox === "none" },
    { key: "networkAllow", group: "sandbox", kind: "custom", custom: hostsField, label: lbl("pform.networkAllow"),
      help: lbl("pform.networkAllow.help"), skip: (raw) => raw.sandbox === "none" },
    { key: "autoBranch", group: "git", kind: "bool", label: lbl("pform.autoBranch"), help: lbl("pform.autoBranch.help") },
    { key: "autoPr", group: "git", kind: "bool", label: lbl("pform.autoPr"), help: autoPrHelp },
    { key: "gitHostRepo", group: "git", kind: "text", label: lbl("pform.gitHostRepo"), help: lbl("pform.gitHostRepo.help"),
      patternKey: "pform.gitHostRepo.bad", attrs: { class: "mono", placeholder: "owner/repo", spellcheck: "false" } },
    { key: "gitHostSyncEnabled", group: "git", kind: "flag01", label: lbl("pform.gitHostSyncEnabled"),
      help: lbl("pform.gitHostSyncEnabled.help") },
    { key: "prBaseBranch", group: "git", kind: "text", required: true, label: lbl("pform.prBaseBranch"),
      patternKey: "pform.prBaseBranch.bad", attrs: { class: "mono", spellcheck: "false" } },
    { key: "prPollSeconds", group: "git", kind: "int", label: lbl("pform.prPollSeconds"),
      help: limitsHelp("pform.prPollSeconds.help", "prPollSeconds") },
    { key: "prFixMaxAttempts", group: "git", kind: "int", label: lbl("pform.prFixMaxAttempts"),
      help: limitsHelp("pform.prFixMaxAttempts.help", "prFixMaxAttempts") },
    { key: "prTrustedAuthors", group: "git", kind: "custom", custom: loginsField, label: lbl("pform.prTrustedAuthors"),
      help: lbl("pform.prTrustedAuthors.help") },
    { key: "autoTest", group: "autoTest", kind: "bool", label: lbl("pform.autoTest"), help: lbl("pform.autoTest.help") },
    { key: "testPrompt", group: "autoTest", kind: "textarea", label: lbl("pform.testPrompt") },
    { key: "stopCheckCommand", group: "autoTest", kind: "text", label: lbl("pform.stopCheckCommand"),
      help: lbl("pform.stopCheckCommand.help"), attrs: { class: "mono", placeholder: "pytest -q", spellcheck: "false" } },
    { key: "stopCheckMaxBlocks", group: "autoTest", kind: "int", label: lbl("pform.stopCheckMaxBlocks"),
      help: limitsHelp("pform.stopCheckMaxBlocks.help", "stopCheckMaxBlocks") },
    { key: "attemptPick", group: "attempts", kind: "select", label: lbl("pform.attemptPick"),
      help: lbl("pform.attemptPick.help"), optionLabel: (v) => t(`pform.attemptPick.${v}`) },
    { key: "keepAttemptBranches", group: "attempts", kind: "bool", label: lbl("pform.keepAttemptBranches"),
      help: lbl("pform.keepAttemptBranches.help") },
    { key: "previewCommand", group: "preview", kind: "text", label: lbl("pform.previewCommand"),
      help: lbl("pform.previewCommand.help"),
      attrs: { class: "mono", placeholder: "python3 -m http.server $PORT --bind 127.0.0.1", spellcheck: "false" } },
    { key: "previewPath", group: "preview", kind: "text", required: true, label: lbl("pform.previewPath"),
      help: lbl("pform.previewPath.help"), attrs: { class: "mono", spellcheck: "false" } },
    { key: "maxRetries", group: "retry", kind: "int", label: lbl("pform.maxRetries"),
      help: limitsHelp("pform.maxRetries.help", "maxRetries") },
    { key: "taskTimeoutMinutes", group: "retry", kind: "int", nullable: true,
      label: lbl("pform.taskTimeoutMinutes"), help: limitsHelp("pform.taskTimeoutMinutes.help", "taskTimeoutMinutes") },
    { key: "taskBudgetUsd", group: "retry", kind: "number", nullable: true,
      label: lbl("pform.taskBudgetUsd"), help: lbl("pform.taskBudgetUsd.help"), attrs: { step: "0.01" } },
  ]);
}

/**
 * A slug suggested from a name: "Müşteri Paneli" → "musteri-paneli", shortened until the
 * server's slug pattern accepts it.
 */
export function suggestSlug(name) {
  let slug = name.toLowerCase().replace(/ı/g, "i").replace(/ß/g, "ss").normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "").replace(/[^a-z0-9]+/g, "-").replace(/^-+/, "").replace(/-+$/, "");
  const pattern = patternOf("Project", "slug");
  while (slug && !pattern.test(slug)) slug = slug.slice(0, -1).replace(/-+$/, "");
  return slug;
}
