// sbx console: a page per route (#/ the sandboxes, #/sandboxes/NAME/TAB one
// sandbox), each refreshed by polling the API every 2 s while it is shown
// and the browser tab is visible (sbxd has no change stream that fits: its
// NDJSON streams are per operation). A poll starts 2 s after the previous
// one ended, so polls never overlap. Nothing here decides anything: sbxd's
// API does, under the signed-in key.

import "@xterm/xterm/css/xterm.css";
import "./style.css";
import {
  APIError,
  apiKey,
  call,
  lines,
  operation,
  sbPath,
  setAPIKey,
  whenUnauthorized,
  type Change,
  type Checkpoint,
  type Diff,
  type NetworkLog,
  type NetworkRules,
  type Port,
  type Process,
  type Sandbox,
  type Snapshot,
  type Usage,
  type UsageEntry,
} from "./api";
import { age, bytes, confirmAction, h, replace, shown, when, type Child } from "./dom";
import { openTerminal, type TerminalSession } from "./terminal";

/** How long after a poll of the shown page ended the next one starts, in ms (live updates). */
const pollMS = 2000;

const app = document.getElementById("app")!;
const where = document.getElementById("where")!;
const live = document.getElementById("live")!;
const signout = document.getElementById("signout") as HTMLButtonElement;

/** The console's settings from sbxd (/console/config.json). */
let settings: { preview_domain: string } = { preview_domain: "" };

/** A shown page: refresh asks the API and redraws what changed; stop ends its timers and streams. */
interface Page {
  refresh(): Promise<void>;
  stop(): void;
}

/**
 * A tab of a sandbox's page: refresh gets the sandbox the page's poll has
 * just read (so that a poll reads it once, not once per part of the page).
 */
interface Tab {
  refresh(sb: Sandbox): Promise<void>;
  stop(): void;
}

let page: Page | null = null;
/** The next poll of the shown page, when one is waiting. */
let timer: number | undefined;
/** Polls the shown page now, unless a poll is under way (which schedules the next itself). */
let pollNow: () => void = () => {};
let notice = "";

whenUnauthorized((e) => {
  signOut(`sbxd refused the key: ${e.code}: ${e.message}`);
});

function signOut(why = ""): void {
  setAPIKey(null);
  notice = why;
  // Back to the start without a hashchange (which would draw it twice).
  if (location.hash !== "" && location.hash !== "#/") history.replaceState(null, "", "#/");
  route();
}

signout.addEventListener("click", () => signOut("signed out"));
window.addEventListener("hashchange", route);
// Hidden: the poll under way is the last until the tab is shown again,
// which polls at once.
document.addEventListener("visibilitychange", () => pollNow());

function setLive(ok: boolean, text: string): void {
  live.className = ok ? "ok" : "bad";
  live.textContent = text;
}

/** Shows the page of the current URL fragment. */
function route(): void {
  // A question of the page left is answered "no".
  const dialog = document.getElementById("confirm") as HTMLDialogElement;
  if (dialog.open) dialog.close();
  page?.stop();
  page = null;
  window.clearTimeout(timer);
  timer = undefined;
  pollNow = () => {};
  signout.hidden = apiKey() === null;
  if (apiKey() === null) {
    where.textContent = "";
    setLive(true, "");
    signIn();
    return;
  }
  const m = /^#\/sandboxes\/([^/]+)(?:\/([a-z]+))?$/.exec(location.hash);
  page = m ? sandboxPage(decodeURIComponent(m[1]), m[2] ?? "timeline") : listPage();
  const p = page;
  let polling = false;
  const paused = () => {
    if (!document.hidden) return false;
    setLive(true, "paused while the tab is hidden");
    return true;
  };
  const poll = async () => {
    window.clearTimeout(timer);
    timer = undefined;
    if (page !== p || polling || paused()) return;
    polling = true;
    try {
      await p.refresh();
      setLive(true, "live · " + new Date().toLocaleTimeString());
    } catch (e) {
      if (e instanceof APIError && e.status === 401) return;
      setLive(false, "not updated: " + errText(e));
    } finally {
      polling = false;
    }
    if (page !== p || paused()) return;
    timer = window.setTimeout(poll, pollMS);
  };
  pollNow = () => void poll();
  void poll();
}

function errText(e: unknown): string {
  if (e instanceof APIError) return `${e.code}: ${e.message}`;
  return e instanceof Error ? e.message : String(e);
}

function signIn(): void {
  const input = h("input", { type: "password", id: "key", autocomplete: "off", placeholder: "API key", required: true });
  const msg = h("p", { class: "error", id: "signin-error" }, notice);
  const form = h(
    "form",
    {
      id: "signin",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        setAPIKey(input.value.trim());
        notice = "";
        try {
          await call<Sandbox[]>("GET", "/v1/sandboxes");
          route();
        } catch (err) {
          // A refused key (401) has signed out already, saying why.
          if (err instanceof APIError && err.status === 401) return;
          setAPIKey(null);
          replace(msg, "Sign-in failed: " + errText(err));
        }
      },
    },
    h("h1", {}, "Sign in to sbx"),
    h("p", {}, "Paste an API key of this sbxd. The console keeps it in this tab only (sessionStorage) and sends it to the API as a bearer key; it sees what the key may see."),
    input,
    " ",
    h("button", { type: "submit" }, "Sign in"),
    msg,
  );
  replace(app, form);
  input.focus();
}

function labels(l: Record<string, string> | null): Child {
  const entries = Object.entries(l ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
  return entries.map(([k, v]) => h("span", { class: "label" }, `${k}=${v}`));
}

function state(s: string, reason?: string): Child {
  return h("span", { class: "state " + (/^[a-z]+$/.test(s) ? s : ""), title: reason ?? "" }, s);
}

/** Sets el's children only when the data drawn from changed (no flicker, focus kept). */
function drawIfChanged(el: HTMLElement & { _data?: string }, data: unknown, draw: () => Child): void {
  const s = JSON.stringify(data);
  if (el._data === s) return;
  el._data = s;
  replace(el, draw());
}

function listPage(): Page {
  where.textContent = " / sandboxes";
  const body = h("div", { id: "sandboxes" });
  replace(app, h("h1", {}, "Sandboxes"), body);
  return {
    async refresh() {
      const sbs = await call<Sandbox[]>("GET", "/v1/sandboxes");
      const hasNode = sbs.some((s) => s.node !== undefined);
      drawIfChanged(body, { sbs, minute: Math.floor(Date.now() / 60000) }, () =>
        sbs.length === 0
          ? h("p", { class: "empty" }, "No sandboxes that this key may see.")
          : h(
              "table",
              {},
              h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "state"), hasNode && h("th", {}, "node"), h("th", {}, "image"), h("th", {}, "age"), h("th", {}, "labels"))),
              h(
                "tbody",
                {},
                sbs.map((s) =>
                  h(
                    "tr",
                    { "data-sandbox": s.name },
                    h("td", {}, h("a", { href: "#/sandboxes/" + encodeURIComponent(s.name) + "/timeline" }, s.name)),
                    h("td", {}, state(s.state, s.state_reason)),
                    hasNode && h("td", {}, s.node || "—"),
                    h("td", {}, s.image),
                    h("td", { title: when(s.create_time) }, age(s.create_time)),
                    h("td", {}, labels(s.labels)),
                  ),
                ),
              ),
            ),
      );
    },
    stop() {},
  };
}

const tabs = ["timeline", "processes", "network", "ports", "terminal", "usage"] as const;

function sandboxPage(name: string, tab: string): Page {
  where.replaceChildren(" / ", h("a", { href: "#/" }, "sandboxes"), " / ", name);
  const head = h("section", { id: "sandbox-head" });
  const status = h("p", { id: "status", class: "status", role: "status" });
  const panel = h("section", { id: "panel", "data-tab": tab });
  const nav = h(
    "nav",
    { class: "tabs" },
    tabs.map((t) => h("a", { href: `#/sandboxes/${encodeURIComponent(name)}/${t}`, class: t === tab ? "current" : "" }, t)),
  );
  replace(app, head, nav, status, panel);
  const say = (s: string, bad = false) => {
    status.className = "status" + (bad ? " bad" : "");
    status.textContent = shown(s);
  };
  const headRefresh = async (): Promise<Sandbox> => {
    const s = await call<Sandbox>("GET", sbPath(name));
    drawIfChanged(head, { s, minute: Math.floor(Date.now() / 60000) }, () => [
      h("h1", {}, s.name, " ", state(s.state, s.state_reason)),
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "id"),
        h("dd", {}, s.id),
        h("dt", {}, "image"),
        h("dd", {}, s.image),
        s.node !== undefined && [h("dt", {}, "node"), h("dd", {}, s.node || "—")],
        h("dt", {}, "age"),
        h("dd", { title: when(s.create_time) }, age(s.create_time)),
        h("dt", {}, "size"),
        h("dd", {}, `${s.cpus} CPU, ${s.memory_mb} MB memory, ${s.disk_mb} MB disk`),
        s.source && [h("dt", {}, "from"), h("dd", {}, [s.source.sandbox, s.source.snapshot].filter(Boolean).join(" / "))],
        h("dt", {}, "labels"),
        h("dd", {}, labels(s.labels)),
      ),
      h(
        "p",
        { class: "actions" },
        h("button", { "data-action": "checkpoint", onclick: () => void checkpointNow() }, "Checkpoint now"),
        " ",
        h("button", { "data-action": "fork", onclick: () => void fork() }, "Fork"),
        " ",
        h("button", { "data-action": "delete", class: "danger", onclick: () => void del() }, "Delete"),
      ),
    ]);
    return s;
  };
  const checkpointNow = async () => {
    say("checkpoint: starting…");
    try {
      const cp = await operation<Checkpoint>("POST", sbPath(name, "checkpoint"), { comment: "from the console" }, (s) => say("checkpoint: " + s));
      say(`checkpoint ${cp.id} taken`);
      pollNow();
    } catch (e) {
      say("checkpoint failed: " + errText(e), true);
    }
  };
  const fork = async () => {
    if (!(await confirmAction(`Fork ${name}? A second live copy starts (a memory snapshot of ${name} is taken; it is paused meanwhile).`, "Fork"))) return;
    say("fork: starting…");
    try {
      const r = await operation<{ copies: { sandbox?: Sandbox; error?: { message: string } }[] }>("POST", sbPath(name, "fork"), {}, (s) => say("fork: " + s));
      const c = r.copies[0];
      if (c?.sandbox) say(`forked: ${c.sandbox.name}`);
      else say("fork failed: " + (c?.error?.message ?? "no copy"), true);
    } catch (e) {
      say("fork failed: " + errText(e), true);
    }
  };
  const del = async () => {
    if (!(await confirmAction(`Delete ${name} and everything it owns (its writable layer and checkpoints)? This cannot be undone.`, "Delete"))) return;
    try {
      await call("DELETE", sbPath(name));
      location.hash = "#/";
    } catch (e) {
      say("delete failed: " + errText(e), true);
    }
  };
  const sub: Tab =
    tab === "processes"
      ? processesTab(name, panel)
      : tab === "network"
        ? networkTab(name, panel)
        : tab === "ports"
          ? portsTab(name, panel)
          : tab === "terminal"
            ? terminalTab(name, panel, say)
            : tab === "usage"
              ? usageTab(name, panel)
              : timelineTab(name, panel, say);
  return {
    async refresh() {
      await sub.refresh(await headRefresh());
    },
    stop() {
      sub.stop();
    },
  };
}

type Step = { kind: "checkpoint"; cp: Checkpoint; prev?: string } | { kind: "snapshot"; sn: Snapshot };

function timelineTab(name: string, panel: HTMLElement, say: (s: string, bad?: boolean) => void): Tab {
  const list = h("ol", { class: "timeline", id: "timeline" });
  replace(panel, h("h2", {}, "Checkpoints and snapshots"), list);
  /** The open diffs, by step ("live" for the disk now), kept across redraws. */
  const open = new Map<string, HTMLElement>();
  let busy = false;
  const diffOf = async (id: string, from: string | undefined, box: HTMLElement) => {
    replace(box, "reading the diff…");
    try {
      const q = from ? "?from=" + encodeURIComponent(from) : "";
      const d = await call<Diff>("GET", sbPath(name, "checkpoints", id, "diff") + q);
      replace(box, diffView(d));
    } catch (e) {
      replace(box, h("span", { class: "error" }, "diff: " + errText(e)));
    }
  };
  const toggle = (key: string, id: string, from: string | undefined) => {
    const box = open.get(key);
    if (box) {
      open.delete(key);
      box.remove();
      return;
    }
    const nb = h("div", { class: "diff", "data-diff": key });
    open.set(key, nb);
    document.querySelector(`li[data-step="${CSS.escape(key)}"]`)?.appendChild(nb);
    void diffOf(id, from, nb);
  };
  const restore = async (cp: Checkpoint) => {
    if (busy) return;
    const ok = await confirmAction(
      `Restore ${name} to ${cp.id}${cp.comment ? ` (${cp.comment})` : ""}? Its processes end and its disk becomes what it was at ${when(cp.create_time)}. Newer checkpoints are kept.`,
      "Restore",
    );
    if (!ok) return;
    busy = true;
    say(`restore to ${cp.id}: starting…`);
    try {
      const sb = await operation<Sandbox>("POST", sbPath(name, "checkpoints", cp.id, "restore"), undefined, (s) => say(`restore to ${cp.id}: ${s}`));
      say(`restored to ${cp.id}: ${sb.name} is ${sb.state}; the next request boots it on that disk`);
      for (const b of open.values()) b.remove();
      open.clear();
      pollNow();
    } catch (e) {
      say(`restore to ${cp.id} failed: ${errText(e)}`, true);
    } finally {
      busy = false;
    }
  };
  const startFrom = async (sn: Snapshot) => {
    if (!(await confirmAction(`Start a new sandbox from snapshot ${sn.name || sn.id}, running, with the memory and processes of ${when(sn.create_time)}?`, "Start copy"))) return;
    try {
      const sb = await call<Sandbox>("POST", "/v1/sandboxes", { snapshot: sn.id });
      say(`started ${sb.name} from ${sn.id}`);
    } catch (e) {
      say("start from snapshot failed: " + errText(e), true);
    }
  };
  const delSnapshot = async (sn: Snapshot) => {
    if (!(await confirmAction(`Delete snapshot ${sn.name || sn.id}? Its memory image and disk are freed; this cannot be undone.`, "Delete"))) return;
    try {
      await call("DELETE", "/v1/snapshots/" + encodeURIComponent(sn.id));
      say(`deleted snapshot ${sn.id}`);
      pollNow();
    } catch (e) {
      say("delete snapshot failed: " + errText(e), true);
    }
  };
  const refresh = async (sb: Sandbox) => {
    // sbxd filters the snapshots by the sandbox's id (a name may have
    // belonged to a deleted sandbox before).
    const [cps, sns] = await Promise.all([
      call<Checkpoint[]>("GET", sbPath(name, "checkpoints")),
      call<Snapshot[]>("GET", "/v1/snapshots?sandbox=" + encodeURIComponent(sb.id)),
    ]);
    const steps: Step[] = [];
    cps.forEach((cp, i) => steps.push({ kind: "checkpoint", cp, prev: cps[i + 1]?.id }));
    for (const sn of sns) steps.push({ kind: "snapshot", sn });
    const t = (s: Step) => Date.parse(s.kind === "checkpoint" ? s.cp.create_time : s.sn.create_time);
    steps.sort((a, b) => t(b) - t(a));
    drawIfChanged(list, { steps, minute: Math.floor(Date.now() / 60000) }, () => [
      h(
        "li",
        { "data-step": "live", class: "step live" },
        h("span", { class: "id" }, "now"),
        h("span", { class: "what" }, "the disk as it is"),
        h("span", { class: "buttons" }, cps.length > 0 && h("button", { "data-action": "diff", onclick: () => toggle("live", "live", undefined) }, `changes since ${cps[0].id}`)),
      ),
      steps.map((s) =>
        s.kind === "checkpoint"
          ? h(
              "li",
              { "data-step": s.cp.id, class: "step checkpoint" + (s.cp.health !== "ok" ? " damaged" : "") },
              h("span", { class: "id" }, s.cp.id),
              h(
                "span",
                { class: "what" },
                h("span", { class: "comment" }, s.cp.comment || (s.cp.id === "v0" ? "the fresh disk" : "")),
                h(
                  "span",
                  { class: "meta" },
                  `${when(s.cp.create_time)} · ${s.cp.files} files, ${bytes(s.cp.size_bytes)} · stored ${bytes(s.cp.added_bytes)}`,
                  s.cp.source_id && ` · taken after a restore of ${s.cp.source_id}`,
                  s.cp.health !== "ok" && ` · ${s.cp.health}`,
                ),
              ),
              h(
                "span",
                { class: "buttons" },
                s.prev && h("button", { "data-action": "diff", onclick: () => toggle(s.cp.id, s.cp.id, s.prev) }, `diff from ${s.prev}`),
                " ",
                h("button", { "data-action": "restore", class: "danger", onclick: () => void restore(s.cp) }, "Restore"),
              ),
            )
          : h(
              "li",
              { "data-step": "snapshot:" + s.sn.id, class: "step snapshot" },
              h("span", { class: "id" }, "snapshot"),
              h(
                "span",
                { class: "what" },
                h("span", { class: "comment" }, s.sn.name || s.sn.id),
                h(
                  "span",
                  { class: "meta" },
                  `${when(s.sn.create_time)} · memory ${bytes(s.sn.memory_bytes)}, disk ${bytes(s.sn.disk_bytes)} · stored ${bytes(s.sn.stored_bytes)}`,
                  s.sn.expire_time && ` · expires ${when(s.sn.expire_time)}`,
                ),
              ),
              h(
                "span",
                { class: "buttons" },
                h("button", { "data-action": "start", onclick: () => void startFrom(s.sn) }, "Start a copy"),
                " ",
                h("button", { "data-action": "delete-snapshot", class: "danger", onclick: () => void delSnapshot(s.sn) }, "Delete"),
              ),
            ),
      ),
    ]);
    // Redrawn rows lose their open diffs: put them back.
    for (const [key, box] of open) {
      const li = list.querySelector(`li[data-step="${CSS.escape(key)}"]`);
      if (li && box.parentElement !== li) li.appendChild(box);
    }
  };
  return { refresh, stop() {} };
}

function changeRows(kind: string, cs: Change[] | null): Child {
  return (cs ?? []).map((c) =>
    h(
      "tr",
      { class: kind },
      h("td", { class: "kind" }, kind === "added" ? "+" : kind === "deleted" ? "−" : "~"),
      h("td", { class: "path" }, c.path, c.link_target && h("span", { class: "meta" }, " → " + c.link_target)),
      h("td", {}, c.old_type && c.old_type !== c.type ? `${c.old_type} → ${c.type}` : c.type),
      h("td", { class: "num" }, kind === "added" ? bytes(c.size) : kind === "deleted" ? bytes(c.old_size) : `${bytes(c.old_size)} → ${bytes(c.size)}`),
    ),
  );
}

function diffView(d: Diff): Child {
  const n = (x: Change[] | null) => (x ?? []).length;
  return [
    h(
      "p",
      { class: "summary" },
      `${d.from} → ${d.to}: ${n(d.added)} added, ${n(d.modified)} modified, ${n(d.deleted)} deleted`,
      d.truncated && " (cut: more changes than shown)",
    ),
    n(d.added) + n(d.modified) + n(d.deleted) > 0 &&
      h("table", { class: "changes" }, h("tbody", {}, changeRows("added", d.added), changeRows("modified", d.modified), changeRows("deleted", d.deleted))),
  ];
}

function processesTab(name: string, panel: HTMLElement): Tab {
  const body = h("div", { id: "processes" });
  const out = h("div", { id: "output" });
  replace(panel, h("h2", {}, "Processes"), h("p", { class: "meta" }, "Commands started through the API (exec), with their state and output."), body, out);
  let reading: AbortController | null = null;
  const showOutput = async (p: Process) => {
    reading?.abort();
    const ac = new AbortController();
    reading = ac;
    const pre = h("pre", { class: "output" });
    replace(out, h("h3", {}, `output of pid ${p.pid}`, " ", h("button", { onclick: () => (ac.abort(), replace(out)) }, "close")), pre);
    let size = 0;
    try {
      await lines(
        "GET",
        sbPath(name, "processes", String(p.pid), "output"),
        undefined,
        (l) => {
          if ((l.type === "stdout" || l.type === "stderr") && typeof l.data === "string" && size < 1 << 20) {
            size += l.data.length;
            pre.append(h("span", { class: l.type }, l.data));
          } else if (l.type === "exit") pre.append(h("span", { class: "meta" }, `\n[exited with code ${(l as { exit_code?: number }).exit_code}]`));
        },
        ac.signal,
      );
    } catch (e) {
      if (!ac.signal.aborted) pre.append(h("span", { class: "error" }, "\n" + errText(e)));
    }
  };
  return {
    async refresh() {
      const ps = await call<Process[]>("GET", sbPath(name, "processes"));
      drawIfChanged(body, ps, () =>
        ps.length === 0
          ? h("p", { class: "empty" }, "No processes.")
          : h(
              "table",
              {},
              h("thead", {}, h("tr", {}, h("th", {}, "pid"), h("th", {}, "command"), h("th", {}, "state"), h("th", {}, "exit"), h("th", {}, "started"), h("th", {}, "output"))),
              h(
                "tbody",
                {},
                ps.map((p, i) =>
                  h(
                    "tr",
                    {},
                    h("td", { class: "num" }, p.pid),
                    h("td", { class: "cmd" }, p.cmd.join(" ")),
                    h("td", {}, p.state),
                    h("td", { class: "num" }, p.exit_code ?? ""),
                    h("td", { title: when(p.start_time) }, age(p.start_time)),
                    h("td", {}, h("button", { onclick: () => void showOutput(p) }, bytes(p.output_bytes))),
                  ),
                ),
              ),
            ),
      );
    },
    stop() {
      reading?.abort();
    },
  };
}

function list(xs: string[] | null): Child {
  return xs && xs.length > 0 ? xs.map((x) => h("span", { class: "label" }, x)) : "—";
}

function networkTab(name: string, panel: HTMLElement): Tab {
  const rules = h("div", { id: "rules" });
  const log = h("div", { id: "netlog" });
  replace(panel, h("h2", {}, "Network rules"), rules, h("h2", {}, "Refused connections"), log);
  return {
    async refresh() {
      const [r, l] = await Promise.all([call<NetworkRules>("GET", sbPath(name, "network")), call<NetworkLog>("GET", sbPath(name, "network", "log"))]);
      drawIfChanged(rules, r, () =>
        h(
          "dl",
          { class: "facts" },
          h("dt", {}, "internet"),
          h("dd", {}, r.internet ? (r.allow && r.allow.length > 0 ? "only the allowed" : "on") : "off"),
          h("dt", {}, "allow"),
          h("dd", {}, list(r.allow)),
          h("dt", {}, "deny"),
          h("dd", {}, list(r.deny)),
          h("dt", {}, "connect"),
          h("dd", {}, list(r.connect)),
        ),
      );
      const c: Partial<NetworkLog["counts"]> = l.counts ?? {};
      drawIfChanged(log, l, () => [
        h(
          "p",
          { class: "meta" },
          `DNS: ${c.dns_answered ?? 0} answered, ${c.dns_refused ?? 0} refused · connections: ${c.connections_allowed ?? 0} allowed, ${c.connections_refused ?? 0} refused · packets refused: ${c.packets_refused ?? 0}`,
        ),
        (l.refused ?? []).length === 0
          ? h("p", { class: "empty" }, "Nothing refused.")
          : h(
              "table",
              {},
              h("thead", {}, h("tr", {}, h("th", {}, "last"), h("th", {}, "kind"), h("th", {}, "destination"), h("th", {}, "address"), h("th", {}, "reason"), h("th", {}, "count"))),
              h(
                "tbody",
                {},
                (l.refused ?? []).map((x) =>
                  h(
                    "tr",
                    {},
                    h("td", { title: when(x.time) }, age(x.time)),
                    h("td", {}, x.kind),
                    h("td", {}, x.destination),
                    h("td", {}, x.address ? `${x.address}${x.port ? ":" + x.port : ""}` : ""),
                    h("td", {}, x.reason),
                    h("td", { class: "num" }, x.count),
                  ),
                ),
              ),
            ),
      ]);
    },
    stop() {},
  };
}

/**
 * The preview URL of a port: host-based (its own browser origin) when sbxd
 * has a preview domain, else path-based under sbxd's origin.
 */
function previewURL(name: string, port: number): string {
  if (settings.preview_domain !== "" && /^[a-z0-9-]{1,63}$/.test(name) && name.length + String(port).length < 63) {
    return `${location.protocol}//${port}-${name}.${settings.preview_domain}${location.port ? ":" + location.port : ""}/`;
  }
  return sbPath(name, "ports", String(port)) + "/";
}

function portsTab(name: string, panel: HTMLElement): Tab {
  const body = h("div", { id: "ports" });
  replace(
    panel,
    h("h2", {}, "Ports"),
    h(
      "p",
      { class: "meta" },
      "TCP ports programs listen on in the sandbox. A preview opens the port through sbxd, in a new tab; its link carries a token that opens that port only (docs/api.md, Ports).",
    ),
    body,
  );
  return {
    async refresh() {
      const ps = await call<Port[]>("GET", sbPath(name, "ports"));
      // The token sbxd minted for this key opens that port once, without
      // the key in the URL; without one the preview asks for the key.
      const links = ps.map((p) => {
        const u = previewURL(name, p.port);
        return { shown: u, href: p.preview_token ? `${u}?sbx_preview=${encodeURIComponent(p.preview_token)}` : u };
      });
      drawIfChanged(body, ps, () =>
        ps.length === 0
          ? h("p", { class: "empty" }, "Nothing listens.")
          : h(
              "table",
              {},
              h("thead", {}, h("tr", {}, h("th", {}, "port"), h("th", {}, "address"), h("th", {}, "pid"), h("th", {}, "command"), h("th", {}, "preview"))),
              h(
                "tbody",
                {},
                ps.map((p, i) =>
                  h(
                    "tr",
                    {},
                    h("td", { class: "num" }, p.port),
                    h("td", {}, p.address),
                    h("td", { class: "num" }, p.pid ?? ""),
                    h("td", {}, p.command ?? ""),
                    h("td", {}, h("a", { href: links[i].href, target: "_blank", rel: "noopener noreferrer" }, links[i].shown)),
                  ),
                ),
              ),
            ),
      );
    },
    stop() {},
  };
}

function terminalTab(name: string, panel: HTMLElement, say: (s: string, bad?: boolean) => void): Tab {
  const tstatus = h("span", { id: "term-status" });
  const box = h("div", { id: "terminal" });
  let session: TerminalSession | null = null;
  const connect = () => {
    session?.close();
    replace(box);
    session = openTerminal(box, name, (s) => replace(tstatus, s));
  };
  replace(panel, h("h2", {}, "Terminal ", h("button", { onclick: connect }, "reconnect"), " ", tstatus), box);
  connect();
  say("");
  return {
    async refresh() {},
    stop() {
      session?.close();
    },
  };
}

/** How many UTC days the usage tab plots, today included. */
const usageDays = 14;
const dayMS = 86_400_000;

/** One UTC day of the usage plot: its "2006-01-02" name and the sandbox's usage (null: none recorded). */
interface UsageDay {
  day: string;
  usage: UsageEntry | null;
}

/**
 * Usage: what this sandbox used per UTC day over the last usageDays days
 * and in all, from GET /v1/usage?group_by=sandbox asked once per day
 * (since/until its midnights; the API has no per-sandbox-per-day grouping),
 * the sandbox found by id (a deleted sandbox of the same name has its own
 * entry). A day that ended more than an hour ago is asked once while the
 * tab is shown; today (and yesterday in its first hour, for readings that
 * land late) at every poll. Today counts up to sbxd's last reading (at
 * most its usage_interval old).
 */
function usageTab(name: string, panel: HTMLElement): Tab {
  const body = h("div", { id: "usage" });
  replace(
    panel,
    h("h2", {}, "Usage"),
    h("p", { class: "meta" }, `What ${name} used per UTC day over the last ${usageDays} days, and its cost at sbxd's prices (docs/api.md, Usage).`),
    body,
  );
  /** The days that are over, by name: the sandbox's entry or null. */
  const done = new Map<string, UsageEntry | null>();
  let prices: Usage["prices"] | null = null;
  return {
    async refresh(sb) {
      const now = Date.now();
      const today = now - (now % dayMS);
      const starts = Array.from({ length: usageDays }, (_, i) => today - (usageDays - 1 - i) * dayMS);
      const days = await Promise.all(
        starts.map(async (start): Promise<UsageDay> => {
          const day = new Date(start).toISOString().slice(0, 10);
          const kept = done.get(day);
          if (kept !== undefined) return { day, usage: kept };
          const q = `?group_by=sandbox&since=${encodeURIComponent(new Date(start).toISOString())}&until=${encodeURIComponent(new Date(start + dayMS).toISOString())}`;
          const u = await call<Usage>("GET", "/v1/usage" + q);
          prices = u.prices;
          const usage = (u.usage ?? []).find((e) => e.sandbox_id === sb.id) ?? null;
          if (start + dayMS + 3_600_000 < now) done.set(day, usage);
          return { day, usage };
        }),
      );
      for (const day of done.keys()) if (day < days[0].day) done.delete(day);
      drawIfChanged(body, { days, prices }, () => plotUsage(days, prices));
    },
    stop() {},
  };
}

/** A number as text: up to 4 significant decimals for small ones, none for large. */
function num(v: number): string {
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a >= 1000 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 0.01 ? v.toFixed(2) : v.toPrecision(2);
}

/** The usage plot's measures: what a bar's height is. */
const usageMeasures: { id: string; title: string; of: (e: UsageEntry) => number; text: (v: number) => string }[] = [
  { id: "cost", title: "Cost, US dollars", of: (e) => e.cost, text: (v) => "$" + (v === 0 ? "0" : v >= 0.0001 ? v.toFixed(4) : v.toPrecision(2)) },
  { id: "cpu", title: "CPU used, seconds (one core busy for a second is 1)", of: (e) => e.cpu_seconds, text: (v) => num(v) + " s" },
  { id: "memory", title: "Memory allocated while running, GiB-seconds", of: (e) => e.memory_gib_seconds, text: (v) => num(v) + " GiB·s" },
];

/** One measure's bars, one per day, oldest first; each bar holds its value in data-value. */
function usageBars(m: (typeof usageMeasures)[number], days: UsageDay[]): HTMLElement {
  const values = days.map((d) => (d.usage ? m.of(d.usage) : 0));
  const max = Math.max(0, ...values);
  return h(
    "figure",
    { class: "plot", "data-measure": m.id },
    h("figcaption", {}, m.title, h("span", { class: "meta" }, ` · highest day ${m.text(max)}`)),
    h(
      "div",
      { class: "bars" },
      days.map((d, i) => {
        const fill = h("span", { class: "fill" });
        fill.style.height = max > 0 ? `${((values[i] / max) * 100).toFixed(1)}%` : "0";
        return h(
          "div",
          { class: "bar" + (values[i] > 0 ? " used" : "") + (i === days.length - 1 ? " today" : ""), "data-day": d.day, "data-value": String(values[i]), title: `${d.day} (UTC): ${m.text(values[i])}` },
          h("span", { class: "track" }, fill),
          h("span", { class: "day" }, d.day.slice(5)),
        );
      }),
    ),
  );
}

/** The usage tab's plot: cost, CPU and memory per day, then the totals and the numbers. */
function plotUsage(days: UsageDay[], prices: Usage["prices"] | null): Child {
  const total = { cpu_seconds: 0, memory_gib_seconds: 0, stored_byte_seconds: 0, cost: 0 };
  for (const d of days) {
    if (!d.usage) continue;
    total.cpu_seconds += d.usage.cpu_seconds;
    total.memory_gib_seconds += d.usage.memory_gib_seconds;
    total.stored_byte_seconds += d.usage.stored_byte_seconds;
    total.cost += d.usage.cost;
  }
  const [cost, cpu, memory] = usageMeasures;
  const stored = (v: number) => num(v / 1e9 / 3600) + " GB·h";
  return [
    h(
      "dl",
      { class: "facts", id: "usage-total" },
      h("dt", {}, "window"),
      h("dd", {}, `${days[0].day} – ${days[days.length - 1].day} (UTC; today so far)`),
      h("dt", {}, "cost"),
      h("dd", { "data-total": "cost" }, cost.text(total.cost)),
      h("dt", {}, "CPU"),
      h("dd", { "data-total": "cpu" }, cpu.text(total.cpu_seconds)),
      h("dt", {}, "memory"),
      h("dd", { "data-total": "memory" }, memory.text(total.memory_gib_seconds)),
      h("dt", {}, "stored"),
      h("dd", { "data-total": "stored" }, stored(total.stored_byte_seconds)),
      prices && [
        h("dt", {}, "prices"),
        h("dd", {}, `$${prices.cpu_hour} per vCPU-hour used, $${prices.memory_gib_hour} per GiB-hour allocated, $${prices.storage_gb_month} per GB-month stored`),
      ],
    ),
    total.cost === 0 && total.cpu_seconds === 0 && total.memory_gib_seconds === 0 && total.stored_byte_seconds === 0 && h("p", { class: "empty" }, "No usage recorded in these days."),
    usageMeasures.map((m) => usageBars(m, days)),
    h(
      "details",
      {},
      h("summary", {}, "the numbers"),
      h(
        "table",
        { class: "usage-days" },
        h("thead", {}, h("tr", {}, h("th", {}, "day (UTC)"), h("th", {}, "cost"), h("th", {}, "CPU"), h("th", {}, "memory"), h("th", {}, "stored"))),
        h(
          "tbody",
          {},
          days
            .slice()
            .reverse()
            .map((d) =>
              h(
                "tr",
                {},
                h("td", {}, d.day),
                h("td", { class: "num" }, cost.text(d.usage?.cost ?? 0)),
                h("td", { class: "num" }, cpu.text(d.usage?.cpu_seconds ?? 0)),
                h("td", { class: "num" }, memory.text(d.usage?.memory_gib_seconds ?? 0)),
                h("td", { class: "num" }, stored(d.usage?.stored_byte_seconds ?? 0)),
              ),
            ),
        ),
      ),
    ),
  ];
}

async function start(): Promise<void> {
  try {
    const r = await fetch("/console/config.json", { cache: "no-store", credentials: "omit" });
    if (r.ok) settings = (await r.json()) as typeof settings;
  } catch {
    // previews fall back to path-based links
  }
  route();
}

void start();
