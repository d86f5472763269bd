// Building the page. Everything that comes from the API is put in as
// text (textContent, setAttribute), never parsed as HTML: a file name or a
// label holding "<img onerror=...>" shows as those characters. shown()
// also makes control characters (ANSI escape sequences included) and
// bidirectional overrides visible, so that a name cannot hide or reorder
// what is around it.

export type Child = Node | string | number | null | undefined | false | Child[];

type Attr = string | boolean | undefined | ((e: Event) => void);

/** An element: attributes as text (on* as listeners, booleans as presence), children as text or nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, Attr> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, v);
  }
  append(el, children);
  return el;
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(shown(String(c))));
  }
}

/**
 * s with its C0 and C1 control characters (ESC of ANSI sequences, CR,
 * BEL...; not tab or newline) and its bidirectional controls written as
 * visible escapes: "\x1b[31m" shows as \x1b[31m.
 */
export function shown(s: string): string {
  return s.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (c) => {
    const n = c.charCodeAt(0);
    return n < 0x100 ? "\\x" + n.toString(16).padStart(2, "0") : "\\u" + n.toString(16).padStart(4, "0");
  });
}

/** Replaces el's children. */
export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** bytes as B, KiB, MiB, GiB (binary units). */
export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
}

/** How long ago an RFC 3339 time was: "12 s", "3 min", "5 h", "2 d". */
export function age(t: string, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - Date.parse(t)) / 1000));
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

/** An RFC 3339 time as the browser's local date and time. */
export function when(t: string): string {
  const d = new Date(t);
  return isNaN(d.getTime()) ? t : d.toLocaleString();
}

/** Asks to confirm a destructive action in the page's dialog; resolves true on Confirm. */
export function confirmAction(text: string, ok = "Confirm"): Promise<boolean> {
  const d = document.getElementById("confirm") as HTMLDialogElement;
  replace(document.getElementById("confirm-text")!, text);
  const okb = document.getElementById("confirm-ok") as HTMLButtonElement;
  const cancel = document.getElementById("confirm-cancel") as HTMLButtonElement;
  okb.textContent = ok;
  return new Promise((resolve) => {
    const done = (v: boolean) => {
      okb.onclick = cancel.onclick = null;
      d.onclose = null;
      if (d.open) d.close();
      resolve(v);
    };
    okb.onclick = () => done(true);
    cancel.onclick = () => done(false);
    d.onclose = () => done(false);
    d.showModal();
  });
}
