// The terminal: xterm.js on sbxd's PTY WebSocket,
// GET /v1/sandboxes/{name}/exec?tty=1 (docs/api.md, Terminal). A browser's
// WebSocket cannot send an Authorization header, so the key goes as the
// subprotocol "bearer.<base64url key>" beside "sbx.tty", which is the one
// sbxd selects; never in the URL.

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { apiKey, sbPath } from "./api";

export interface TerminalSession {
  /** Closes the WebSocket (sbxd kills the command) and removes the terminal. */
  close(): void;
}

function base64url(s: string): string {
  const b = new TextEncoder().encode(s);
  let bin = "";
  for (const x of b) bin += String.fromCharCode(x);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * Opens a login shell of sandbox name in a terminal inside el; status gets
 * what happens to the session (connected, exit code, errors) as text.
 */
export function openTerminal(el: HTMLElement, name: string, status: (s: string) => void): TerminalSession {
  const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(el);
  fit.fit();
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${proto}//${location.host}${sbPath(name, "exec")}?tty=1&rows=${term.rows}&cols=${term.cols}`;
  const ws = new WebSocket(url, ["sbx.tty", "bearer." + base64url(apiKey() ?? "")]);
  ws.binaryType = "arraybuffer";
  status("connecting…");
  const enc = new TextEncoder();
  let ended = false;
  ws.onmessage = (ev: MessageEvent) => {
    if (typeof ev.data !== "string") {
      term.write(new Uint8Array(ev.data as ArrayBuffer));
      return;
    }
    const m = JSON.parse(ev.data) as { type: string; pid?: number; exit_code?: number; error?: string; code?: string };
    if (m.type === "start") status(`connected: pid ${m.pid}`);
    else if (m.type === "exit") {
      ended = true;
      status(`the shell exited with code ${m.exit_code}`);
    } else if (m.type === "error") {
      ended = true;
      status(`error: ${m.code}: ${m.error}`);
    }
  };
  ws.onclose = () => {
    if (!ended) status("disconnected");
  };
  ws.onerror = () => status("the terminal could not connect (see the browser's console)");
  const data = term.onData((d) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
  });
  const resize = term.onResize(({ rows, cols }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", rows, cols }));
  });
  const onWindow = () => fit.fit();
  window.addEventListener("resize", onWindow);
  term.focus();
  return {
    close() {
      window.removeEventListener("resize", onWindow);
      data.dispose();
      resize.dispose();
      ws.close();
      term.dispose();
    },
  };
}
