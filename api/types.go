package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"time"
)

// State is a sandbox's lifecycle state. The engine moves a sandbox
// creating → running ⇄ paused → stopped → suspended → deleting.
type State string

// Sandbox states, as in API.md.
const (
	StateCreating  State = "creating"
	StateRunning   State = "running"
	StatePaused    State = "paused"
	StateStopped   State = "stopped"
	StateSuspended State = "suspended"
	StateDeleting  State = "deleting"
)

// NameMaxLen is the longest sandbox or image name, in bytes.
const NameMaxLen = 63

// Sandbox is the sandbox object of GET /v1/sandboxes/{name}.
type Sandbox struct {
	// ID is immutable, "sbx_" and 16 lowercase hex digits.
	ID string `json:"id"`
	// Name is unique among live sandboxes: [a-z0-9][a-z0-9-]{0,62}.
	Name  string `json:"name"`
	State State  `json:"state"`
	// StateReason says why the sandbox is in its state when that was not
	// asked for, e.g. "oom_killed: the sandbox passed its 512 MB memory limit".
	StateReason string `json:"state_reason,omitempty"`
	// Image is the name of the image whose root filesystem is the base layer.
	Image string `json:"image"`
	// CPUs is the CPU limit in cores (a cgroup CPU quota; fractions allowed).
	CPUs float64 `json:"cpus"`
	// MemoryMB is the memory limit in MiB (a cgroup memory limit).
	MemoryMB int `json:"memory_mb"`
	// DiskMB is the disk quota in MiB of what the sandbox writes (its
	// writable layer); 0 when this sbxd has no disk quotas (GET /v1/health
	// disk_quota).
	DiskMB int `json:"disk_mb"`
	// Env is merged into the environment of every exec.
	Env    map[string]string `json:"env"`
	Labels map[string]string `json:"labels"`
	// Network holds the sandbox's network rules.
	Network NetworkRules `json:"network"`
	// Volumes are the named host directories mounted in the sandbox.
	Volumes []Volume `json:"volumes"`
	// TimeoutMS is the idle time before auto-suspend; 0 means never.
	TimeoutMS int64 `json:"timeout_ms"`
	// KeepAliveWhileRunning: a process running in the sandbox counts as
	// activity for TimeoutMS.
	KeepAliveWhileRunning bool `json:"keep_alive_while_running"`
	// RecoveryIntervalMS is how often, in ms, its node takes a recovery
	// snapshot of it while it runs (a cluster's node only; docs/cluster.md,
	// "Node loss"); 0 never.
	RecoveryIntervalMS int64 `json:"recovery_interval_ms"`
	// RecoveryTime is when its latest recovery snapshot was captured: if
	// its node is lost, another node recovers it as it was then (or from a
	// later checkpoint's disk). Omitted when it has none.
	RecoveryTime *time.Time `json:"recovery_time,omitempty"`
	// WakeOn is the event key a suspended sandbox waits on.
	WakeOn string `json:"wake_on,omitempty"`
	// SuspendTime is when a suspended sandbox was suspended.
	SuspendTime *time.Time `json:"suspend_time,omitempty"`
	CreateTime  time.Time  `json:"create_time"`
	// Source is what the sandbox was forked or started from, or null.
	Source *Source `json:"source"`
	// Node is the name of the sbxd node the sandbox runs on, when sbxd is
	// a cluster's node (GET /v1/nodes); omitted on a single sbxd and while
	// the sandbox is suspended (any node may wake it).
	Node string `json:"node,omitempty"`
}

// Source names the sandbox and snapshot a sandbox was forked or started from.
type Source struct {
	Sandbox  string `json:"sandbox,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

// NetworkRules are a sandbox's egress rules: {internet, allow, deny,
// connect}, enforced on the host (see docs/api.md, "Network rules").
type NetworkRules struct {
	// Internet false cuts all egress. When the field is absent from a JSON
	// object it is true, as the API's default is internet on: {"allow":
	// ["pypi.org"]} means "internet, but only pypi.org".
	Internet bool `json:"internet"`
	// Allow, when non-empty, is the only egress allowed: domain names
	// ("pypi.org", "*.pythonhosted.org") and IPv4 CIDRs ("10.0.0.0/8"; a bare
	// address is a /32). At most 1000 entries.
	Allow []string `json:"allow"`
	// Deny wins over Allow; same forms and limit.
	Deny []string `json:"deny"`
	// Connect lists the names of other sandboxes this one may open
	// connections to (on their sandbox addresses, or by name: "web" or
	// "web.sbx.internal"). At most 1000 entries.
	Connect []string `json:"connect"`
}

// UnmarshalJSON decodes rules, with internet true unless the object says
// otherwise.
func (n *NetworkRules) UnmarshalJSON(b []byte) error {
	type plain NetworkRules
	p := plain{Internet: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*n = NetworkRules(p)
	return nil
}

// NetworkLog is what the host refused for a sandbox and counts of what it
// decided, since the sandbox's network was last set up (its boot, or sbxd's
// start): GET /v1/sandboxes/{name}/network/log.
type NetworkLog struct {
	Counts NetworkCounts `json:"counts"`
	// Refused are recent refused destinations, newest first, one entry per
	// (kind, destination, port); at most 256.
	Refused []NetworkRefusal `json:"refused"`
	// Secrets are the recent requests of the sandbox that carried one of
	// its secrets' placeholders, allowed or refused, newest first; at most
	// 256. Absent when the sandbox has no secrets.
	Secrets []SecretUse `json:"secrets,omitempty"`
}

// SecretUse is one request that carried a secret's placeholder through the
// egress proxy: the audit of secrets.
type SecretUse struct {
	Time time.Time `json:"time"`
	// Secret is the secret's name.
	Secret string `json:"secret"`
	// Host, Method and Path are the request's (the path without its query).
	Host   string `json:"host"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Allowed: the value was put in and the request sent; otherwise the
	// proxy answered 403 and the request went nowhere.
	Allowed bool `json:"allowed"`
	// Reason says why a refused request was refused.
	Reason string `json:"reason,omitempty"`
}

// NetworkCounts count decisions of the host's network enforcement.
type NetworkCounts struct {
	// DNSAnswered and DNSRefused count queries to sbxd's DNS server.
	DNSAnswered uint64 `json:"dns_answered"`
	DNSRefused  uint64 `json:"dns_refused"`
	// ConnectionsAllowed and ConnectionsRefused count HTTP and HTTPS
	// connections through the egress proxy.
	ConnectionsAllowed uint64 `json:"connections_allowed"`
	ConnectionsRefused uint64 `json:"connections_refused"`
	// PacketsRefused counts packets the firewall dropped (a refused TCP
	// connection is several: the first SYN and its retries).
	PacketsRefused uint64 `json:"packets_refused"`
}

// NetworkRefusal is one refused destination.
type NetworkRefusal struct {
	// Time is when it was last refused.
	Time time.Time `json:"time"`
	// Kind is how it was refused: "dns" (a name not answered), "http" or
	// "tls" (a proxied connection, by Host header or SNI), "connection" (a
	// proxied connection without a name), "packet" (the firewall).
	Kind string `json:"kind"`
	// Destination is the name asked for, or the address.
	Destination string `json:"destination"`
	// Address is the IPv4 address, when known.
	Address string `json:"address,omitempty"`
	// Port is the destination port (0 for DNS).
	Port uint16 `json:"port,omitempty"`
	// Reason says which rule refused it.
	Reason string `json:"reason"`
	// Count is how many times it was refused (packets: at least 1, the
	// firewall keeps only the last time).
	Count uint64 `json:"count"`
}

// Volume attaches a named host directory, which outlives sandboxes, at Path.
type Volume struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Every field is
// optional.
type CreateSandboxRequest struct {
	Name     string            `json:"name,omitempty"`
	Image    string            `json:"image,omitempty"`
	CPUs     float64           `json:"cpus,omitempty"`
	MemoryMB int               `json:"memory_mb,omitempty"`
	DiskMB   int               `json:"disk_mb,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Network  *NetworkRules     `json:"network,omitempty"`
	Volumes  []Volume          `json:"volumes,omitempty"`
	// Snapshot starts the sandbox from a memory snapshot (by id), running,
	// with the snapshot's disk, memory and processes; image, cpus and
	// memory_mb come from the snapshot.
	Snapshot string `json:"snapshot,omitempty"`
	// TimeoutMS is the idle time before auto-suspend in ms; 0 = never.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// KeepAliveWhileRunning makes a process running in the sandbox count
	// as activity for TimeoutMS.
	KeepAliveWhileRunning bool `json:"keep_alive_while_running,omitempty"`
	// RecoveryIntervalMS, on a cluster's node whose nodes share a blob
	// store, takes a recovery snapshot (memory and disk, paused for the
	// capture) every this many ms while the sandbox runs: when its node is
	// lost, another node recovers it from the latest one, with its
	// processes. 0 (default) takes none; else [5000, 86400000]. Not with
	// volumes, nor with secrets on a node without a cluster key (they do
	// not move between nodes).
	RecoveryIntervalMS int64 `json:"recovery_interval_ms,omitempty"`
	// Secrets are held by sbxd, outside the sandbox: the sandbox sees a
	// placeholder in an env var named after each, which the egress proxy
	// replaces with the value in requests its rules allow (docs/api.md,
	// "Secrets"). With Snapshot they are added to the snapshot's, a name
	// given replacing the snapshot's secret of that name.
	Secrets []Secret `json:"secrets,omitempty"`
}

// Secret is a secret as given at create or with PUT
// /v1/sandboxes/{name}/secrets: its value never enters the sandbox.
type Secret struct {
	// Name is the env var that holds the placeholder in the sandbox: an
	// env-var name ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters).
	Name string `json:"name"`
	// Value is the secret: 1 byte to 64 KiB, no NUL, CR or LF (it goes
	// into HTTP headers). Never answered by any GET.
	Value string `json:"value"`
	// Rules say where the value may go: a request gets it only when its
	// host, method and path match one rule. At least one, at most 100.
	Rules []SecretRule `json:"rules"`
}

// SecretRule is one place a secret may be sent.
type SecretRule struct {
	// Host is a host name ("api.example.org") or "*.example.org" (every
	// name under it): no scheme, port, path or IP address.
	Host string `json:"host"`
	// Methods are HTTP methods in upper case (GET, HEAD, POST, PUT, PATCH,
	// DELETE, OPTIONS); at least one.
	Methods []string `json:"methods"`
	// PathPrefix is the path a request's must equal or continue with a
	// "/" ("/v1" matches /v1 and /v1/x, not /v10); default "/", every path.
	PathPrefix string `json:"path_prefix,omitempty"`
}

// SecretInfo is a secret as answered: its value never is.
type SecretInfo struct {
	Name string `json:"name"`
	// Placeholder is what the sandbox sees in $Name ("sbx-secret-" and 32
	// hex digits), the same for the sandbox's life; forks and sandboxes
	// started from its snapshots keep it.
	Placeholder string       `json:"placeholder"`
	Rules       []SecretRule `json:"rules"`
	// ValueBytes is the value's length in bytes.
	ValueBytes int       `json:"value_bytes"`
	UpdateTime time.Time `json:"update_time"`
}

// SecretList is the answer of GET and PUT /v1/sandboxes/{name}/secrets,
// secrets by name.
type SecretList struct {
	Secrets []SecretInfo `json:"secrets"`
}

// SetSecretsRequest is the body of PUT /v1/sandboxes/{name}/secrets: it
// replaces all of the sandbox's secrets (an empty list removes them). A
// secret that keeps its name keeps its placeholder.
type SetSecretsRequest struct {
	Secrets []Secret `json:"secrets"`
}

// PutSecretRequest is the body of PUT /v1/sandboxes/{name}/secrets/{secret}:
// it adds the secret or replaces its value and rules. Value may be left out
// for a secret that exists (its rules change, its value stays).
type PutSecretRequest struct {
	Value *string      `json:"value,omitempty"`
	Rules []SecretRule `json:"rules"`
}

// UpdateSandboxRequest is the body of PUT /v1/sandboxes/{name}: the
// fields given change, the others stay.
type UpdateSandboxRequest struct {
	// Name renames the sandbox ([a-z0-9][a-z0-9-]{0,62}); 409 name_taken
	// when another sandbox has it. A running sandbox's hostname follows at
	// once, a stopped or suspended one's when it next boots or resumes.
	// Other sandboxes' connect rules follow names: those naming the new name
	// reach it from now on, those naming the old one no longer do.
	Name *string `json:"name,omitempty"`
	// Labels replaces all of the sandbox's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// TimeoutMS is the idle time before auto-suspend in ms; 0 = never.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// KeepAliveWhileRunning: see CreateSandboxRequest.
	KeepAliveWhileRunning *bool `json:"keep_alive_while_running,omitempty"`
	// RecoveryIntervalMS: see CreateSandboxRequest; 0 stops taking
	// recovery snapshots and drops the latest.
	RecoveryIntervalMS *int64 `json:"recovery_interval_ms,omitempty"`
}

// SuspendRequest is the optional body of POST /v1/sandboxes/{name}/suspend.
type SuspendRequest struct {
	// WakeOn is an event key: POST /v1/events/{key} resumes the sandbox.
	// 1 to 256 bytes of [A-Za-z0-9._:/-].
	WakeOn string `json:"wake_on,omitempty"`
}

// Event is an event delivered to a sandbox: GET /v1/sandboxes/{name}/events.
type Event struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	// Data is the body posted, when it was JSON; DataText when it was UTF-8
	// text; DataBase64 otherwise (standard base64).
	Data       json.RawMessage `json:"data,omitempty"`
	DataText   string          `json:"data_text,omitempty"`
	DataBase64 string          `json:"data_base64,omitempty"`
	// CreateTime is when it was posted; DeliverTime when it reached the
	// sandbox (later if it waited for the sandbox to suspend on its key).
	CreateTime  time.Time `json:"create_time"`
	DeliverTime time.Time `json:"deliver_time"`
	// ExpireTime, on a pending event (GET /v1/events), is when it is
	// dropped if no sandbox suspends on its key before.
	ExpireTime *time.Time `json:"expire_time,omitempty"`
}

// HeaderNextCursor names the response header of a paged list (events)
// that holds the cursor of the next page; it is absent on the last page.
const HeaderNextCursor = "X-Next-Cursor"

// CancelEventsResult answers DELETE /v1/events?key=K.
type CancelEventsResult struct {
	// Cancelled is how many pending events of the key were deleted.
	Cancelled int `json:"cancelled"`
}

// EventResult answers POST /v1/events/{key}.
type EventResult struct {
	ID string `json:"id"`
	// Woken are the names of the sandboxes it was delivered to (and that
	// are resuming); empty when none waits on the key, and then the event
	// is kept for one that suspends on it later.
	Woken []string `json:"woken"`
	// Pending is true when the event was kept for later.
	Pending bool `json:"pending"`
	// ExpireTime is when a pending event is dropped.
	ExpireTime *time.Time `json:"expire_time,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{name}/exec.
type ExecRequest struct {
	// Cmd is the argv; Cmd[0] is looked up in PATH when it has no slash.
	Cmd []string `json:"cmd"`
	// Cwd is the working directory; default /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Env is merged over the sandbox's env for this process only.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutMS kills the process group after this many ms (exit code 124);
	// default 600000, 0 means the default.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Stdin is written to the process's standard input, which is then closed.
	Stdin string `json:"stdin,omitempty"`
	// StdinBase64 is Stdin for bytes that are not UTF-8 text: standard
	// base64 (RFC 4648). At most one of the two.
	StdinBase64 string `json:"stdin_base64,omitempty"`
	// Encoding of stdout and stderr in the answer: "" or "utf-8" (JSON
	// strings; bytes that are not UTF-8 become U+FFFD) or "base64" (exact
	// bytes, standard base64, each line's data decodable on its own).
	Encoding string `json:"encoding,omitempty"`
	// Detach answers at once with the process id ({"pid": N}); the output
	// is kept for GET .../processes/{pid}/output.
	Detach bool `json:"detach,omitempty"`
	// Undo is taken before the command starts (docs/undo.md): "" or
	// "none", "auto" (by the command's class), "git" (a repository
	// snapshot of the git work tree that holds Cwd), "checkpoint" (a disk
	// checkpoint), "snapshot" (a memory snapshot kept 1 day). Not with
	// Detach.
	Undo string `json:"undo,omitempty"`
	// RollbackOnFailure puts the undo back when the command exits non-zero
	// (a timeout too). Needs Undo.
	RollbackOnFailure bool `json:"rollback_on_failure,omitempty"`
	// TTY runs the command on a pseudo-terminal of this size: only on the
	// terminal route (GET .../exec?tty=1, a WebSocket), where input is
	// typed and the output is one stream.
	TTY *Winsize `json:"tty,omitempty"`
	// Keep keeps a terminal's command running when its client goes: it
	// is attached again by pid (GET .../processes/{pid}/tty). Only on the
	// terminal route (its query's keep=1), never in a JSON body.
	Keep bool `json:"-"`
}

// TTYMessage is a text message of the terminal WebSocket (GET
// /v1/sandboxes/{name}/exec?tty=1). From the client: "resize" (Rows,
// Cols) and "signal" (Signal, to the command's process group). From sbxd:
// "start" (PID), then at the end "exit" (ExitCode, DurationMS, TimedOut)
// or "error" (Error, Code). The terminal's bytes travel as binary
// messages both ways.
type TTYMessage struct {
	Type       string `json:"type"`
	PID        int    `json:"pid,omitempty"`
	Rows       uint16 `json:"rows,omitempty"`
	Cols       uint16 `json:"cols,omitempty"`
	Signal     int    `json:"signal,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Error      string `json:"error,omitempty"`
	Code       Code   `json:"code,omitempty"`
}

// Types of TTYMessage from the client (sbxd's are the ExecEvent types
// start, exit and error).
const (
	TTYResize = "resize"
	TTYSignal = "signal"
)

// Winsize is a terminal's size in character cells (each 1..1000).
type Winsize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Values of ExecRequest.Undo and UndoResult.Kind.
const (
	UndoNone       = "none"
	UndoAuto       = "auto"
	UndoGit        = "git"
	UndoCheckpoint = "checkpoint"
	UndoSnapshot   = "snapshot"
)

// UndoResult says which undo a guarded exec took and whether it was put
// back.
type UndoResult struct {
	// Kind is "none", "git", "checkpoint" or "snapshot".
	Kind string `json:"kind"`
	// Class is the command's class for undo "auto": "none", "git",
	// "checkpoint" or "fork" (package undo).
	Class string `json:"class,omitempty"`
	// Checkpoint is the id of the checkpoint taken ("v4"); Snapshot the
	// id of the snapshot taken.
	Checkpoint string `json:"checkpoint,omitempty"`
	Snapshot   string `json:"snapshot,omitempty"`
	// Git is the repository snapshot taken, for kind "git".
	Git *GitUndo `json:"git,omitempty"`
	// RolledBack is true when the command failed and the undo was put
	// back; RollbackError says why a rollback that was due failed.
	RolledBack    bool   `json:"rolled_back"`
	RollbackError string `json:"rollback_error,omitempty"`
}

// GitUndo is the repository snapshot of a guarded exec with undo "git"
// (docs/undo.md, "The git undo"): what its rollback puts back.
type GitUndo struct {
	// Repo is the work tree's top directory, inside the sandbox.
	Repo string `json:"repo"`
	// Head is HEAD's commit (40 or 64 hex digits), "none" in a repository
	// without commits.
	Head string `json:"head"`
	// Ref is the branch HEAD was on ("refs/heads/main"), or "detached".
	Ref string `json:"ref"`
	// IndexTree is the tree of the index (what was staged).
	IndexTree string `json:"index_tree"`
	// WorkTree is the tree of the working tree with its untracked files
	// (ignored files are not in it, and a rollback leaves them alone).
	WorkTree string `json:"work_tree"`
}

// ClassifyRequest is the body of POST /v1/classify.
type ClassifyRequest struct {
	// Cmd is the command: a JSON string is a shell line (as sh -c runs
	// it); an array is an argv (["sh", "-c", S] classifies the line S).
	Cmd Command `json:"cmd"`
}

// Command is a command given either as a shell line or as an argv. A
// JSON string S decodes to ["sh", "-c", S]; an array of strings to
// itself; anything else is an error.
type Command []string

// UnmarshalJSON decodes a string (a shell line) or an array of strings.
//
// Errors: *json.UnmarshalTypeError for any other JSON value.
func (c *Command) UnmarshalJSON(b []byte) error {
	var line string
	if err := json.Unmarshal(b, &line); err == nil {
		*c = Command{"sh", "-c", line}
		return nil
	}
	var argv []string
	if err := json.Unmarshal(b, &argv); err != nil || argv == nil {
		return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: reflect.TypeOf(""), Offset: 0}
	}
	*c = argv
	return nil
}

// jsonValueKind names the kind of JSON value b ("number", "object", ...).
func jsonValueKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "value"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// ClassifyResult answers POST /v1/classify: the lightest undo that
// covers the command (package undo, docs/undo.md "checkpointFor").
type ClassifyResult struct {
	// Undo is "none", "git", "checkpoint" or "fork".
	Undo string `json:"undo"`
	// Reason is one sentence that names the part of the command that
	// decided it and what undoes it.
	Reason string `json:"reason"`
}

// Output encodings of ExecRequest.Encoding.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// ExecResult is the buffered answer of exec.
type ExecResult struct {
	// PID is the process id inside the sandbox.
	PID      int    `json:"pid"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	// DurationMS is the wall time from process start to exit, in ms.
	DurationMS int64 `json:"duration_ms"`
	// TimedOut is true when the process was killed by its timeout (exit 124).
	TimedOut bool `json:"timed_out,omitempty"`
	// Truncated is true when stdout or stderr passed the buffered-output
	// limit (MaxBufferedOutput bytes each) and was cut.
	Truncated bool `json:"truncated,omitempty"`
	// Undo is the undo taken when the request asked for one.
	Undo *UndoResult `json:"undo,omitempty"`
}

// MaxBufferedOutput is the most bytes of stdout, and of stderr, that a
// buffered exec answer carries; stream with NDJSON for more.
const MaxBufferedOutput = 16 << 20

// Exec stream line types.
const (
	// ExecStart is the first line: the process runs, with PID.
	ExecStart  = "start"
	ExecStdout = "stdout"
	ExecStderr = "stderr"
	ExecExit   = "exit"
	ExecError  = "error"
)

// ExecEvent is one NDJSON line of a streamed exec: stdout and stderr lines
// carry Data; the last line is "exit" (ExitCode, DurationMS) or "error"
// (Error, Code).
type ExecEvent struct {
	Type       string `json:"type"`
	PID        int    `json:"pid,omitempty"`
	Data       string `json:"data,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Error      string `json:"error,omitempty"`
	Code       Code   `json:"code,omitempty"`
	// Undo, on the exit line, is the undo taken when the request asked
	// for one.
	Undo *UndoResult `json:"undo,omitempty"`
}

// FileType names the kind of a directory entry.
type FileType string

// File types in a listing.
const (
	FileRegular FileType = "file"
	FileDir     FileType = "dir"
	FileSymlink FileType = "symlink"
	FileOther   FileType = "other"
)

// FileInfo is one entry of GET .../files?path=DIR&list=1.
type FileInfo struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Type FileType `json:"type"`
	// Size in bytes.
	Size int64 `json:"size"`
	// Mode is the permission bits, e.g. 0644 (decimal in JSON).
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	// LinkTarget is set for symlinks.
	LinkTarget string `json:"link_target,omitempty"`
}

// Image is an image: a read-only root filesystem shared by every sandbox
// made from it.
type Image struct {
	Name string `json:"name"`
	// Digest is the OCI manifest digest for pulled and imported images, or
	// the sha256 of the build recipe for built ones.
	Digest string `json:"digest"`
	// Source says where the image came from: "build:<recipe>",
	// "registry:<ref>", "archive", "oci-layout".
	Source string `json:"source"`
	// SizeBytes is the size of the unpacked root filesystem.
	SizeBytes  int64     `json:"size_bytes"`
	CreateTime time.Time `json:"create_time"`
	// Env is the image config's environment (KEY=VALUE), the base of every
	// exec's environment.
	Env []string `json:"env"`
}

// BuildImageRequest is the body of POST /v1/images/build.
type BuildImageRequest struct {
	// Name of the image to build. "default" builds Debian bookworm minbase
	// with DefaultPackages.
	Name string `json:"name"`
	// Suite is the Debian suite; default "bookworm".
	Suite string `json:"suite,omitempty"`
	// Packages are included besides minbase; default DefaultPackages.
	Packages []string `json:"packages,omitempty"`
	// NoCache rebuilds even when the build cache holds the same recipe.
	NoCache bool `json:"no_cache,omitempty"`
}

// DefaultPackages are the Debian packages of the default image, besides
// the minbase variant.
var DefaultPackages = []string{"ca-certificates", "curl", "git", "python3", "procps", "iproute2"}

// PullImageRequest is the body of POST /v1/images/pull.
type PullImageRequest struct {
	Name string `json:"name"`
	// Ref is an OCI reference, e.g. "registry.example.org/team/app:1.2".
	Ref string `json:"ref"`
	// Insecure allows plain HTTP to the registry.
	Insecure bool `json:"insecure,omitempty"`
	// Platform selects from a multi-platform index, "linux/amd64" by default.
	Platform string `json:"platform,omitempty"`
}

// Progress line types of NDJSON long operations.
const (
	LineInfo     = "info"
	LineComplete = "complete"
	LineError    = "error"
)

// StreamLine is one line of a long operation's NDJSON answer:
// {"type":"info","data":"...","time":...}, then one final
// {"type":"complete","data":{...}} or {"type":"error","error":"...","code":"..."}.
type StreamLine struct {
	Type  string          `json:"type"`
	Data  json.RawMessage `json:"data,omitempty"`
	Error string          `json:"error,omitempty"`
	Code  Code            `json:"code,omitempty"`
	// RequestID, on an error line, is the id sbxd logged the cause under
	// (as X-Request-Id).
	RequestID string    `json:"request_id,omitempty"`
	Time      time.Time `json:"time"`
}

// Health is the answer of GET /v1/health.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// Runtime is the OCI runtime and its platform, e.g. "runsc/systrap".
	Runtime string `json:"runtime"`
	// Platform is runsc's platform: "kvm" or "systrap" (or what the
	// operator chose).
	Platform string `json:"platform,omitempty"`
	// PlatformReason says why that platform, e.g. "/dev/kvm exists but the
	// CPU has no vmx/svm flag (no nested virtualisation)".
	PlatformReason string `json:"platform_reason,omitempty"`
	// WarmSandboxes is how many booted sandboxes wait in the pool.
	WarmSandboxes int `json:"warm_sandboxes"`
	// PID is sbxd's process id on the host.
	PID int `json:"pid"`
	// Layers is where writable layers live: "btrfs" (a subvolume each,
	// with a disk quota) or "dir" (plain directories, no quota).
	Layers string `json:"layers"`
	// DiskQuota reports whether sandboxes get a disk quota; false on
	// "dir" layers, where disk_mb is refused.
	DiskQuota bool `json:"disk_quota"`
	// DefaultDiskMB is the quota of a sandbox created without disk_mb (0
	// without quotas).
	DefaultDiskMB int `json:"default_disk_mb"`
	// LayersNote says why btrfs is not in use, when it was wanted.
	LayersNote string `json:"layers_note,omitempty"`
	// Checkpoints is how disk checkpoints of new sandboxes are taken:
	// "btrfs-snapshot" (a snapshot without a pause, stored in the blob
	// store in the background) or "capture" (read into the blob store
	// while the request waits).
	Checkpoints string `json:"checkpoints"`
	// Capacity is what this host admits.
	Capacity *Capacity `json:"capacity,omitempty"`
}

// Capacity is what a host admits (docs/security.md, "Disk quota, upload
// size and admission").
type Capacity struct {
	// HostCPUs and HostMemoryMB are the host's, before the reserve.
	HostCPUs     int `json:"host_cpus"`
	HostMemoryMB int `json:"host_memory_mb"`
	// MaxSandboxCPUs and MaxSandboxMemoryMB are what remains after the
	// reserve for sbxd and the host: the most one sandbox may ask for, and
	// the limit on the cgroup of all sandboxes together.
	MaxSandboxCPUs     float64 `json:"max_sandbox_cpus"`
	MaxSandboxMemoryMB int     `json:"max_sandbox_memory_mb"`
	// CPUOvercommit and MemoryOvercommit: the sandboxes not suspended may
	// have limits adding up to this many times the allocatable amounts.
	CPUOvercommit    float64 `json:"cpu_overcommit"`
	MemoryOvercommit float64 `json:"memory_overcommit"`
	// MaxSandboxes and MaxSnapshots cap how many exist.
	MaxSandboxes int `json:"max_sandboxes"`
	MaxSnapshots int `json:"max_snapshots"`
}

// CheckpointRequest is the body of POST /v1/sandboxes/{name}/checkpoint.
type CheckpointRequest struct {
	// Comment is at most MaxCommentBytes bytes.
	Comment string `json:"comment,omitempty"`
}

// MaxCommentBytes bounds a checkpoint's comment.
const MaxCommentBytes = 1024

// Checkpoint health values.
const (
	HealthOK      = "ok"
	HealthDamaged = "damaged"
)

// Checkpoint is a disk checkpoint of a sandbox: v0 (the fresh disk), v1, ...
type Checkpoint struct {
	ID         string    `json:"id"`
	CreateTime time.Time `json:"create_time"`
	Comment    string    `json:"comment"`
	// SourceID is the checkpoint the disk had been restored from when this
	// one was taken (null if none since v0); for a fork's v0,
	// "<sandbox>/<id>" of the parent's disk it copied.
	SourceID *string `json:"source_id"`
	// Health is "ok", or "damaged" when a verification found a missing or
	// corrupt chunk.
	Health string `json:"health"`
	// SizeBytes is the size of the files of the writable layer (what the
	// sandbox wrote over its image); Files their number.
	SizeBytes int64 `json:"size_bytes"`
	Files     int   `json:"files"`
	// AddedBytes is what this checkpoint added to the blob store, after
	// deduplication and compression.
	AddedBytes int64 `json:"added_bytes"`
	// StoreTime is when the checkpoint was safely in the blob store; nil
	// while it is a snapshot on the sandbox's node only, stored in the
	// background (SizeBytes, Files and AddedBytes are 0 until then). It
	// can be restored either way.
	StoreTime *time.Time `json:"store_time"`
}

// Change is a path that differs between two disks.
type Change struct {
	Path string `json:"path"`
	// Type is file, dir, symlink, char, block, fifo or socket; OldType is
	// set when a modification changed the type.
	Type    string `json:"type"`
	OldType string `json:"old_type,omitempty"`
	// LinkTarget is a symlink's target.
	LinkTarget string `json:"link_target,omitempty"`
	// Size is the size on the newer disk (0 if deleted); OldSize on the
	// older one (0 if added).
	Size    int64 `json:"size"`
	OldSize int64 `json:"old_size"`
}

// Diff is the answer of GET .../checkpoints/{id}/diff?from={id}.
type Diff struct {
	From     string   `json:"from"`
	To       string   `json:"to"`
	Added    []Change `json:"added"`
	Modified []Change `json:"modified"`
	Deleted  []Change `json:"deleted"`
	// Truncated is true when a list was cut at the limit.
	Truncated bool `json:"truncated,omitempty"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{name}/snapshot.
type SnapshotRequest struct {
	// Name is a label for the caller (≤ 63 bytes); it need not be unique.
	Name string `json:"name,omitempty"`
	// RetentionDays is how long the snapshot is kept, in days (fractions
	// allowed), default 7, at most 3650.
	RetentionDays *float64 `json:"retention_days,omitempty"`
	// Metadata is the caller's JSON object (≤ 64 KiB), returned as is.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// CaptureStepsPrefix begins the progress line of a snapshot, fork or
// suspend that gives its capture's steps, in ms: "capture steps (ms):
// quiesce Q, runsc pause P, disk D, runsc checkpoint C, runsc resume R,
// agent wake W" (resume and wake 0 for a suspend). StartStepsPrefix begins
// that of a start from a snapshot or a resume: "start steps (ms): disk D,
// netns N, runsc restore R, agent A". The words may grow; sbx bench reads
// the numbers after each name. DiskStepsPrefix begins that of a disk
// checkpoint taken as a btrfs snapshot ("disk steps (ms): btrfs snapshot S,
// record R") and of a restore from one ("disk steps (ms): stop T, unmount
// U, btrfs snapshot S, btrfs qgroup Q, swap W, record R"; stop is 0 for a
// stopped sandbox); numbers may have a fraction. ReleaseStepsPrefix
// begins that of a suspend's release of the host's resources, after its
// capture: "release steps (ms): runsc delete D, netns N, layer L,
// checkpoint snapshots C, record R".
const (
	CaptureStepsPrefix = "capture steps (ms):"
	StartStepsPrefix   = "start steps (ms):"
	DiskStepsPrefix    = "disk steps (ms):"
	ReleaseStepsPrefix = "release steps (ms):"
)

// MaxMetadataBytes bounds a snapshot's metadata.
const MaxMetadataBytes = 64 << 10

// Snapshot is a memory snapshot: disk, memory and running processes of a
// sandbox at one paused instant.
type Snapshot struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Sandbox is the name of the sandbox it was taken of.
	Sandbox    string     `json:"sandbox"`
	CreateTime time.Time  `json:"create_time"`
	ExpireTime *time.Time `json:"expire_time"`
	// MemoryBytes is the size of the memory image (touched memory);
	// DiskBytes of the writable layer's files; StoredBytes what the snapshot
	// added to the blob store (shared chunks are counted once, by the first).
	MemoryBytes int64           `json:"memory_bytes"`
	DiskBytes   int64           `json:"disk_bytes"`
	StoredBytes int64           `json:"stored_bytes"`
	Metadata    json.RawMessage `json:"metadata"`
	// Billable is false for the snapshot a fork takes for itself.
	Billable bool `json:"billable"`
	// Health is HealthOK, or HealthDamaged when its memory record cannot
	// be read: it cannot be restored or forked from (delete it); the blob
	// collection keeps the chunks the record still names and goes on.
	Health string `json:"health"`
	// StoreTime is when its memory image was safely in the blob store; nil
	// while the image is only on the node that took it, being stored in
	// the background (memory_bytes is the image's size on that node;
	// stored_bytes counts the disk only until then). A listed snapshot
	// can be restored and forked from either way.
	StoreTime *time.Time `json:"store_time"`
}

// ForkRequest is the body of POST /v1/sandboxes/{name}/fork.
type ForkRequest struct {
	// Name of the copy; with Count > 1, copies are Name-1, Name-2, ...
	// Default: generated.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Network rules of the copies (e.g. {"internet": false}); default the
	// original's.
	Network *NetworkRules `json:"network,omitempty"`
	// Count is the number of copies, 1 to 16 (default 1).
	Count int `json:"count,omitempty"`
}

// MaxForkCount bounds ForkRequest.Count.
const MaxForkCount = 16

// ForkCopy is one copy of a fork: a sandbox, or why it failed.
type ForkCopy struct {
	Sandbox *Sandbox   `json:"sandbox,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// ForkResult is the complete data of a fork.
type ForkResult struct {
	// Snapshot is the id of the snapshot the fork took for itself.
	Snapshot string     `json:"snapshot"`
	Copies   []ForkCopy `json:"copies"`
	// PausedMS is how long the original was paused, in ms.
	PausedMS int64 `json:"paused_ms"`
}

// Process is a process started by exec.
type Process struct {
	// PID is its process id inside the sandbox (and in every copy of it).
	PID       int       `json:"pid"`
	Cmd       []string  `json:"cmd"`
	StartTime time.Time `json:"start_time"`
	// State is "running" or "exited".
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// OutputBytes is how much output (stdout and stderr) it produced; an
	// attach resumes at a byte offset in it.
	OutputBytes int64 `json:"output_bytes"`
}

// SignalRequest is the body of POST .../processes/{pid}/signal.
type SignalRequest struct {
	// Signal number, e.g. 15 (SIGTERM), 9 (SIGKILL).
	Signal int `json:"signal"`
}

// Port is a TCP port that a program listens on inside a sandbox: an element
// of GET /v1/sandboxes/{name}/ports, e.g.
// {"port":3000,"address":"0.0.0.0","pid":12,"command":"python3"}.
type Port struct {
	// Port is the TCP port number, 1-65535.
	Port int `json:"port"`
	// Address is the address the socket is bound to: "0.0.0.0" or "::"
	// (every address), "127.0.0.1" or "::1" (loopback only), or one of the
	// sandbox's own addresses. sbxd reaches the port whichever it is.
	Address string `json:"address"`
	// PID is the process holding the socket, inside the sandbox; omitted
	// when it is not found.
	PID int `json:"pid,omitempty"`
	// Command is that process's command name (as in /proc/PID/comm, at
	// most 15 bytes); omitted with PID.
	Command string `json:"command,omitempty"`
	// PreviewToken opens this port's preview in a browser without the API
	// key in the URL: add "?sbx_preview=<token>" to the preview URL (path-
	// or host-based) that names the sandbox as the request for this list
	// did (name or id). sbxd mints it for the request's key (lowercase hex
	// HMAC-SHA256 under a configured key; "<key id>.<hex HMAC>" for a key
	// record, which stops working when the key is revoked). Omitted over
	// the Unix socket, where no key is used.
	PreviewToken string `json:"preview_token,omitempty"`
}
