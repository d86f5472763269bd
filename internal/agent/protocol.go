// Package agent is the channel between sbxd and the small agent that runs as
// init (PID 1) inside every sandbox and spawns processes on request.
//
// The agent listens on a Unix socket that it creates in a host directory
// bind-mounted at /.sbx/run (runsc --host-uds=create lets a guest socket be a
// host socket). The channel works whatever the sandbox's network rules are,
// costs ~0.3 ms a round trip, and processes it starts are descendants of the
// container's init, so they survive a gVisor checkpoint and restore (those
// started by `runsc exec` do not; see PLATFORM.md).
//
// Wire format: every message is a frame, one type byte, a 4-byte big-endian
// payload length, then the payload (at most MaxFrame bytes). A connection
// carries one operation: the host sends a FrameRequest (JSON [Request]),
// the two sides exchange data frames, and the agent ends with FrameResult,
// FrameExit or FrameFail. Closing the connection early cancels the operation
// (an exec's process group is killed). A dial is the one exception: after
// its FrameResult the connection carries raw bytes to and from a TCP port
// in the sandbox (OpDial).
package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/sbxhq/sbx/api"
	"io"
)

// Frame types.
const (
	FrameRequest byte = 'Q' // host → agent: JSON Request
	FrameStdin   byte = 'I' // host → agent: stdin bytes; empty payload = EOF
	FrameData    byte = 'D' // either way: file or tar bytes; empty payload = EOF
	FrameStdout  byte = 'O' // agent → host
	FrameStderr  byte = 'E' // agent → host
	FrameStarted byte = 'S' // agent → host: JSON Started, the process runs
	FrameExit    byte = 'X' // agent → host: JSON Exit, last frame of an exec
	FrameResult  byte = 'R' // agent → host: JSON result of a non-exec op
	FrameFail    byte = 'F' // agent → host: JSON Failure, ends any op
	FrameSignal  byte = 'K' // host → agent: JSON {"signal":N} to the process group
	FrameGap     byte = 'G' // agent → host: JSON Gap, output the agent no longer has
	// FrameBusy (agent → host, empty payload) says the agent still works on
	// the operation (scanning a sparse file, sizing an archive) though it
	// has nothing to send yet; the host skips it and restarts its stall
	// deadline.
	FrameBusy byte = 'B'
	// FrameResize (host → agent, JSON Winsize) sets the terminal size of
	// an exec started with TTY.
	FrameResize   byte = 'Z'
	MaxFrame           = 1 << 20
	frameHeaderSz      = 5
)

// Operations of a Request.
const (
	OpPing     = "ping"
	OpExec     = "exec"
	OpRead     = "read"
	OpWrite    = "write"
	OpList     = "list"
	OpRemove   = "remove"
	OpTarOut   = "tar_out"
	OpTarIn    = "tar_in"
	OpHostname = "hostname"
	OpAttach   = "attach" // stream an exec'd process's output from Offset
	OpPs       = "ps"     // list exec'd processes
	OpSignal   = "signal" // signal an exec'd process's group
	// OpQuiesce closes every host socket of the agent (this connection
	// too, after the answer), for a gVisor checkpoint; SIGUSR1 to the
	// agent (runsc kill ID USR1) makes it listen again.
	OpQuiesce = "quiesce"
	// OpPorts lists the TCP ports that programs listen on ([]Port).
	OpPorts = "ports"
	// OpDial connects to a TCP port in the sandbox (Port). The agent
	// answers FrameResult (DialResult) or FrameFail; after the result the
	// connection carries raw bytes both ways, no longer frames, until
	// either side closes (a shutdown of the write side passes through).
	OpDial = "dial"
)

// Request is the first frame of a connection.
type Request struct {
	Op string `json:"op"`
	// Exec fields.
	Cmd       []string `json:"cmd,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	Env       []string `json:"env,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	// Stdin is true when the host sends FrameStdin frames; otherwise the
	// process's stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TTY runs the process on a new pseudo-terminal of Size (its session
	// leader, the terminal its controlling one): stdin frames are typed
	// on it, its output comes as FrameStdout only, FrameResize resizes it.
	//
	// On an attach, TTY asks for the terminal: stdin frames are typed on
	// it and FrameResize resizes it (to Size first, when given); a process
	// that has no terminal is refused (kind invalid, field pid).
	TTY  bool     `json:"tty,omitempty"`
	Size *Winsize `json:"size,omitempty"`
	// Keep (exec with TTY only) keeps the process when the host hangs up:
	// the hang-up only detaches, and the terminal is attached again with
	// an attach with TTY.
	Keep bool `json:"keep,omitempty"`
	// File fields.
	Path      string `json:"path,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	// Detach starts the process and answers at once (FrameStarted); its
	// output is kept for a later attach.
	Detach bool `json:"detach,omitempty"`
	// Attach and signal fields: the process, where to resume its output
	// (bytes of stdout and stderr already received), the signal.
	PID    int   `json:"pid,omitempty"`
	Offset int64 `json:"offset,omitempty"`
	Signal int   `json:"signal,omitempty"`
	// Hostname field.
	Hostname string `json:"hostname,omitempty"`
	// Port is the TCP port of a dial.
	Port int `json:"port,omitempty"`
	// MaxBytes bounds what a read or tar_out may send, in bytes: a read of
	// a larger file, or an archive estimated larger (file data without
	// holes, plus 1536 bytes an entry), fails with kind too_large before
	// any data; an archive that grows past it while streaming is cut
	// (no EOF frame). 0: no bound.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Winsize is a terminal's size in character cells: the API's shape.
type Winsize = api.Winsize

// TarOutResult is the result frame of a tar_out, sent before the archive.
type TarOutResult struct {
	// Type of the path archived: "dir" (the archive holds its contents),
	// "file" or "symlink" (the archive holds that one entry), "other".
	Type string `json:"type"`
	// Estimate is the archive's estimated size in bytes (see
	// Request.MaxBytes); the archive is seldom larger.
	Estimate int64 `json:"estimate"`
}

// Gap reports output an attach asked for that the agent no longer has.
type Gap struct {
	Lost int64 `json:"lost"`
}

// Started is sent once an exec's process runs.
type Started struct {
	PID int `json:"pid"`
}

// Exit ends an exec.
type Exit struct {
	ExitCode int `json:"exit_code"`
	// Signal is the signal that killed the process, 0 if it exited.
	Signal     int   `json:"signal,omitempty"`
	DurationMS int64 `json:"duration_ms"`
	TimedOut   bool  `json:"timed_out,omitempty"`
}

// Failure kinds, the Kind of a Failure.
const (
	FailNotFound    = "not_found"
	FailInvalid     = "invalid"
	FailExists      = "exists"
	FailIsDir       = "is_dir"
	FailNotDir      = "not_dir"
	FailNotEmpty    = "not_empty"
	FailPermission  = "permission"
	FailRefused     = "refused"     // a dial found nothing listening on the port
	FailUnreachable = "unreachable" // a dial's connect failed otherwise (timeout)
	FailTooLarge    = "too_large"   // a read or tar_out over Request.MaxBytes
	// FailReserved: the path resolves (through symlinks) into a place sbx
	// reserves (ReservedPaths).
	FailReserved = "reserved"
	// FailNotRegular: a read of a FIFO, socket or device (it could block or
	// never end).
	FailNotRegular = "not_regular"
	// FailSymlink: a tar entry would be written through a symlink (one the
	// archive made, or one in the sandbox); symlinks are never followed
	// beneath an archive's target.
	FailSymlink  = "symlink"
	FailNoSpace  = "no_space" // the sandbox's disk is full (its quota, or the volume)
	FailInternal = "internal"
)

// Failure is an operation's error as the agent reports it.
type Failure struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Field names the request field at fault ("cmd", "cwd"), if one is.
	Field string `json:"field,omitempty"`
}

// Error is a Failure received by the host; it satisfies error.
type Error struct{ Failure }

func (e *Error) Error() string { return e.Message }

// ReservedPaths are where sbx mounts its own things in a sandbox (the
// agent's socket, kernel filesystems). The agent refuses file operations
// whose path resolves there, whatever symlinks lead to it; the engine
// refuses the same paths by text.
var ReservedPaths = []string{"/.sbx", "/proc", "/sys", "/dev"}

// ErrProtocol reports a malformed or unexpected frame.
var ErrProtocol = errors.New("agent protocol error")

// WriteFrame writes one frame. Payloads longer than MaxFrame are an error.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrProtocol, len(payload), MaxFrame)
	}
	var hdr [frameHeaderSz]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if len(payload) == 0 {
		_, err := w.Write(hdr[:])
		return err
	}
	buf := make([]byte, 0, frameHeaderSz+len(payload))
	buf = append(append(buf, hdr[:]...), payload...)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame into buf (grown as needed) and returns its
// type and payload, which aliases buf.
func ReadFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var hdr [frameHeaderSz]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrProtocol, n, MaxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], buf, nil
}
