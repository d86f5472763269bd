// sbx console: a page per route (#/ the sandboxes, #/sandboxes/NAME/TAB one
// sandbox), each refreshed by polling the API every 2 s while it is shown
// (sbxd has no change stream that fits: its NDJSON streams are per
// operation). Nothing here decides anything: sbxd's API does, under the
// signed-in key.

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
} from "./api";
import { age, bytes, confirmAction, h, replace, shown, when, type Child } from "./dom";
import { openTerminal, type TerminalSession } from "./terminal";

/** How often the shown page asks the API again, in ms (live updates). */
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

let page: Page | null = null;
let timer: number | undefined;
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
  window.clearInterval(timer);
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
  const tick = async () => {
    try {
      await p.refresh();
      setLive(true, "live · " + new Date().toLocaleTimeString());
    } catch (e) {
      if (e instanceof APIError && e.status === 401) return;
      setLive(false, "not updated: " + errText(e));
    }
  };
  void tick();
  timer = window.setInterval(tick, pollMS);
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
  let sb: Sandbox | null = null;
  const headRefresh = async () => {
    sb = await call<Sandbox>("GET", sbPath(name));
    const s = sb;
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
  };
  const checkpointNow = async () => {
    say("checkpoint: starting…");
    try {
      const cp = await operation<Checkpoint>("POST", sbPath(name, "checkpoint"), { comment: "from the console" }, (s) => say("checkpoint: " + s));
      say(`checkpoint ${cp.id} taken`);
      void sub.refresh();
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
  const sub: Page =
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
      await headRefresh();
      await sub.refresh();
    },
    stop() {
      sub.stop();
    },
  };
}

type Step = { kind: "checkpoint"; cp: Checkpoint; prev?: string } | { kind: "snapshot"; sn: Snapshot };

function timelineTab(name: string, panel: HTMLElement, say: (s: string, bad?: boolean) => void): Page {
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
      await refresh();
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
      await refresh();
    } catch (e) {
      say("delete snapshot failed: " + errText(e), true);
    }
  };
  const refresh = async () => {
    const [cps, sns, sb] = await Promise.all([
      call<Checkpoint[]>("GET", sbPath(name, "checkpoints")),
      call<Snapshot[]>("GET", "/v1/snapshots"),
      call<Sandbox>("GET", sbPath(name)),
    ]);
    const steps: Step[] = [];
    cps.forEach((cp, i) => steps.push({ kind: "checkpoint", cp, prev: cps[i + 1]?.id }));
    for (const sn of sns) if (sn.sandbox === sb.name || sn.sandbox === sb.id) steps.push({ kind: "snapshot", sn });
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

function processesTab(name: string, panel: HTMLElement): Page {
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

function networkTab(name: string, panel: HTMLElement): Page {
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

/**
 * The preview token of a port: what sbxd's preview cookie holds, an
 * HMAC-SHA256 under the key of "sbx-preview\0<name>\0<port>" in hex
 * (internal/server, previewToken). A preview link carries it as
 * ?sbx_preview= once, so that it opens that port and nothing else without
 * the key in the URL. null where the browser has no Web Crypto (a page
 * served over plain HTTP from another host than localhost).
 */
async function previewToken(name: string, port: number): Promise<string | null> {
  const key = apiKey();
  if (key === null || !globalThis.crypto?.subtle) return null;
  const enc = new TextEncoder();
  const k = await crypto.subtle.importKey("raw", enc.encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", k, enc.encode(`sbx-preview\0${name}\0${port}`)));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

function portsTab(name: string, panel: HTMLElement): Page {
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
      const links = await Promise.all(
        ps.map(async (p) => {
          const u = previewURL(name, p.port);
          const token = await previewToken(name, p.port);
          return { shown: u, href: token === null ? u : `${u}?sbx_preview=${token}` };
        }),
      );
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

function terminalTab(name: string, panel: HTMLElement, say: (s: string, bad?: boolean) => void): Page {
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

/**
 * Usage over time. sbxd does not meter usage yet (no GET /v1/usage): the
 * tab says so. When the route exists, plotUsage is where its answer is
 * drawn.
 */
function usageTab(name: string, panel: HTMLElement): Page {
  const body = h("div", { id: "usage" });
  replace(panel, h("h2", {}, "Usage"), body);
  let done = false;
  return {
    async refresh() {
      if (done) return;
      try {
        const u = await call<unknown>("GET", "/v1/usage?group_by=sandbox");
        replace(body, plotUsage(name, u));
      } catch (e) {
        if (!(e instanceof APIError) || e.status !== 404) throw e;
        replace(body, h("p", { class: "empty", id: "usage-missing" }, "This sbxd does not meter usage (GET /v1/usage is not there), so there is nothing to plot."));
      }
      done = true;
    },
    stop() {},
  };
}

/** The hook for the usage plot: not built until the API's usage shape exists. */
function plotUsage(_name: string, _usage: unknown): Child {
  return h("p", { class: "empty" }, "sbxd answers GET /v1/usage, but this console does not plot it yet.");
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
