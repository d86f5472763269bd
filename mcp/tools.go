package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// SandboxInfo is a sandbox as the tools show it.
type SandboxInfo struct {
	Name   string            `json:"name" jsonschema:"the sandbox's name: pass it as sandbox to the other tools"`
	ID     string            `json:"id"`
	State  string            `json:"state" jsonschema:"creating, running, paused, stopped, suspended or deleting"`
	Image  string            `json:"image"`
	Labels map[string]string `json:"labels,omitempty"`
}

func infoOf(sb *client.Sandbox) SandboxInfo {
	return SandboxInfo{Name: sb.Name, ID: sb.ID, State: string(sb.State), Image: sb.Image, Labels: sb.Labels}
}

// ExecOutput is what a command did.
type ExecOutput struct {
	ExitCode   int    `json:"exit_code" jsonschema:"the command's exit code: 0 is success, 124 a timeout"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	// CutBytes is how many bytes of stdout and stderr were left out
	// (each keeps its first MaxOutputBytes).
	CutBytes int             `json:"cut_bytes,omitempty" jsonschema:"bytes of output left out: narrow the command (head, grep) or write the output to a file and read parts of it"`
	Undo     *api.UndoResult `json:"undo,omitempty" jsonschema:"the undo taken before the command, and whether it was rolled back"`
}

func execOutput(r *client.ExecResult) *ExecOutput {
	if r == nil {
		return nil
	}
	out := &ExecOutput{ExitCode: r.ExitCode, DurationMS: r.DurationMS, TimedOut: r.TimedOut, Undo: r.Undo}
	var n1, n2 int
	out.Stdout, n1 = cut(r.Stdout)
	out.Stderr, n2 = cut(r.Stderr)
	out.CutBytes = n1 + n2
	return out
}

type sandboxIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
}

type createIn struct {
	Name     string            `json:"name,omitempty" jsonschema:"a name for the sandbox (letters, digits, - and _); default: a generated one"`
	Image    string            `json:"image,omitempty" jsonschema:"the image: default (Debian with python3, git, curl) unless told otherwise"`
	Internet *bool             `json:"internet,omitempty" jsonschema:"false cuts the sandbox off the network; default true"`
	Allow    []string          `json:"allow,omitempty" jsonschema:"when given, the only domains (pypi.org, *.example.org) or IPv4 CIDRs the sandbox may reach"`
	Labels   map[string]string `json:"labels,omitempty"`
}

type execIn struct {
	Sandbox           string            `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Command           string            `json:"command" jsonschema:"a shell command line, run with sh -c"`
	Cwd               string            `json:"cwd,omitempty" jsonschema:"working directory; default /workspace"`
	Env               map[string]string `json:"env,omitempty"`
	Stdin             string            `json:"stdin,omitempty"`
	TimeoutMS         int64             `json:"timeout_ms,omitempty" jsonschema:"kill the command after this many ms (exit 124); default 600000"`
	Undo              string            `json:"undo,omitempty" jsonschema:"take an undo before the command: none (default), auto (chosen by what the command does), git (the git repository around cwd: branch, index, working tree), checkpoint (the disk) or snapshot (disk, memory and processes)"`
	RollbackOnFailure bool              `json:"rollback_on_failure,omitempty" jsonschema:"when the command fails (non-zero exit), put the undo back: the sandbox is as before the command"`
}

type readIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Path    string `json:"path" jsonschema:"absolute path in the sandbox"`
}

// FileContent is a file read.
type FileContent struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Content string `json:"content" jsonschema:"the file's text (UTF-8)"`
}

type writeIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Path    string `json:"path" jsonschema:"absolute path in the sandbox; missing parent directories are made"`
	Content string `json:"content" jsonschema:"the file's new text"`
	Mode    uint32 `json:"mode,omitempty" jsonschema:"permission bits as a decimal number (493 is 0755); default 420 (0644)"`
}

type listIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Path    string `json:"path,omitempty" jsonschema:"absolute path of a directory; default /workspace"`
}

type checkpointIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Comment string `json:"comment,omitempty" jsonschema:"what the disk holds at this point, for later"`
}

type diffIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	From    string `json:"from" jsonschema:"a checkpoint id: v0, v1, ..."`
	To      string `json:"to,omitempty" jsonschema:"a checkpoint id, or current (default): the disk as it is now"`
}

type restoreIn struct {
	Sandbox    string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Checkpoint string `json:"checkpoint" jsonschema:"the checkpoint id to go back to: v0, v1, ..."`
}

type forkIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Name     string `json:"name,omitempty" jsonschema:"the copy's name; default: generated"`
	Internet *bool  `json:"internet,omitempty" jsonschema:"false cuts the copy off the network; default: the original's rules"`
}

type tryIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Step    string `json:"step" jsonschema:"the risky shell command to try"`
	Verify  string `json:"verify,omitempty" jsonschema:"a shell command that checks the step worked (e.g. the tests); exit 0 keeps the copy"`
	Online  bool   `json:"online,omitempty" jsonschema:"let the copy use the network (default: offline)"`
}

// TryOutput is what try_in_copy did.
type TryOutput struct {
	Kept    bool        `json:"kept" jsonschema:"true: the copy passed and replaced the sandbox (same name); false: the sandbox is untouched"`
	Sandbox SandboxInfo `json:"sandbox" jsonschema:"the sandbox to use from now on"`
	Step    *ExecOutput `json:"step,omitempty"`
	Verify  *ExecOutput `json:"verify,omitempty"`
}

type stepIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Step    string `json:"step" jsonschema:"the step's name, 1 to 63 bytes"`
}

type networkIn struct {
	Sandbox  string   `json:"sandbox" jsonschema:"the sandbox's name (or id)"`
	Internet bool     `json:"internet" jsonschema:"false cuts all egress"`
	Allow    []string `json:"allow,omitempty" jsonschema:"when given, the only domains or IPv4 CIDRs allowed"`
	Deny     []string `json:"deny,omitempty" jsonschema:"domains or IPv4 CIDRs denied; wins over allow"`
}

func (t *tools) sandbox(ctx context.Context, name string) (*client.Sandbox, error) {
	if name == "" {
		return nil, fmt.Errorf("%s: sandbox: name the sandbox (list_sandboxes shows them)", api.CodeInvalidArgument)
	}
	sb, err := t.c.Sandboxes.Get(ctx, name)
	if err != nil {
		return nil, toolError(err)
	}
	return sb, nil
}

// tool adds a tool whose errors come back as tool errors for a model.
func tool[In, Out any](s *sdk.Server, name, title, desc string, h func(context.Context, *sdk.CallToolRequest, In) (Out, error)) {
	toolArgs.LoadOrStore(name, argsOf(reflect.TypeFor[In]()))
	sdk.AddTool(s, &sdk.Tool{Name: name, Title: title, Description: desc},
		func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
			out, err := h(ctx, req, in)
			if err != nil {
				var zero Out
				return nil, zero, toolError(err)
			}
			return nil, out, nil
		})
}

func (t *tools) add(s *sdk.Server) {
	tool(s, "create_sandbox", "Create a sandbox",
		"Create an isolated Linux sandbox (gVisor) and start it. Its disk starts as checkpoint v0. Answers the sandbox; pass its name to the other tools.",
		func(ctx context.Context, req *sdk.CallToolRequest, in createIn) (SandboxInfo, error) {
			cr := api.CreateSandboxRequest{Name: in.Name, Image: in.Image, Labels: in.Labels}
			if in.Internet != nil || len(in.Allow) > 0 {
				cr.Network = &api.NetworkRules{Internet: in.Internet == nil || *in.Internet, Allow: in.Allow}
			}
			sb, err := t.c.Sandboxes.CreateStream(ctx, cr, progress(ctx, req))
			if err != nil {
				return SandboxInfo{}, err
			}
			return infoOf(sb), nil
		})
	tool(s, "list_sandboxes", "List sandboxes", "List the sandboxes with their states.",
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (map[string][]SandboxInfo, error) {
			sbs, err := t.c.Sandboxes.List(ctx, nil)
			if err != nil {
				return nil, err
			}
			out := make([]SandboxInfo, 0, len(sbs))
			for _, sb := range sbs {
				out = append(out, infoOf(sb))
			}
			return map[string][]SandboxInfo{"sandboxes": out}, nil
		})
	tool(s, "exec", "Run a command",
		"Run a shell command in the sandbox and wait for it. A non-zero exit is a result, not an error. "+
			"With undo \"auto\" and rollback_on_failure, sbx takes a git snapshot, checkpoint or snapshot first when the command could change things, and puts it back if the command fails.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in execIn) (*ExecOutput, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			if strings.TrimSpace(in.Command) == "" {
				return nil, fmt.Errorf("%s: command: give a shell command line", api.CodeInvalidArgument)
			}
			r, err := sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", in.Command}, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin,
				TimeoutMS: in.TimeoutMS, Undo: in.Undo, RollbackOnFailure: in.RollbackOnFailure})
			if err != nil {
				return nil, err
			}
			return execOutput(r), nil
		})
	tool(s, "read_file", "Read a file", fmt.Sprintf("Read a text file of the sandbox (at most %d bytes).", MaxReadBytes),
		func(ctx context.Context, _ *sdk.CallToolRequest, in readIn) (*FileContent, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			f, err := sb.OpenFileMax(ctx, in.Path, MaxReadBytes)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				return nil, err
			}
			if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
				return nil, fmt.Errorf("%s: %s is not text (%d bytes); inspect it with exec (file, xxd | head)", api.CodeInvalidArgument, in.Path, len(b))
			}
			return &FileContent{Path: in.Path, Size: int64(len(b)), Content: string(b)}, nil
		})
	tool(s, "write_file", "Write a file", "Write a text file in the sandbox, replacing it if it exists.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in writeIn) (map[string]any, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			if err := sb.WriteFile(ctx, in.Path, strings.NewReader(in.Content), in.Mode); err != nil {
				return nil, err
			}
			return map[string]any{"path": in.Path, "bytes": len(in.Content)}, nil
		})
	tool(s, "list_files", "List a directory", "List the entries of a directory of the sandbox.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in listIn) (map[string][]api.FileInfo, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			p := in.Path
			if p == "" {
				p = "/workspace"
			}
			fs, err := sb.ListFiles(ctx, p)
			if err != nil {
				return nil, err
			}
			return map[string][]api.FileInfo{"entries": fs}, nil
		})
	tool(s, "checkpoint", "Checkpoint the disk",
		"Take a disk checkpoint (v1, v2, ...) of the sandbox: what its disk holds now. Cheap: take one before every risky step; restore goes back to it.",
		func(ctx context.Context, req *sdk.CallToolRequest, in checkpointIn) (*api.Checkpoint, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			return sb.CheckpointStream(ctx, in.Comment, progress(ctx, req))
		})
	tool(s, "list_checkpoints", "List checkpoints", "List the sandbox's disk checkpoints, newest first.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (map[string][]api.Checkpoint, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			cps, err := sb.ListCheckpoints(ctx)
			if err != nil {
				return nil, err
			}
			return map[string][]api.Checkpoint{"checkpoints": cps}, nil
		})
	tool(s, "diff", "What changed", "List the paths added, modified and deleted between a checkpoint and another one, or the disk as it is now.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in diffIn) (*api.Diff, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			return sb.DiffN(ctx, in.From, in.To, 500)
		})
	tool(s, "restore", "Restore a checkpoint",
		"Put the sandbox's disk back as it was at a checkpoint. Its running processes end; the next exec starts it again.",
		func(ctx context.Context, req *sdk.CallToolRequest, in restoreIn) (SandboxInfo, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return SandboxInfo{}, err
			}
			if err := sb.Restore(ctx, in.Checkpoint, progress(ctx, req)); err != nil {
				return SandboxInfo{}, err
			}
			if err := sb.Refresh(ctx); err != nil {
				return SandboxInfo{}, err
			}
			return infoOf(sb), nil
		})
	tool(s, "fork", "Fork a live copy",
		"Make a live copy of a running sandbox: its disk, memory and processes. The original runs on untouched. Answers the copy.",
		func(ctx context.Context, req *sdk.CallToolRequest, in forkIn) (SandboxInfo, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return SandboxInfo{}, err
			}
			fr := api.ForkRequest{Name: in.Name}
			if in.Internet != nil && !*in.Internet {
				fr.Network = &api.NetworkRules{Internet: false}
			}
			res, err := sb.ForkStream(ctx, fr, progress(ctx, req))
			if err != nil {
				return SandboxInfo{}, err
			}
			if len(res.Copies) == 0 || res.Copies[0] == nil {
				if len(res.Errors) > 0 && res.Errors[0] != nil {
					return SandboxInfo{}, res.Errors[0]
				}
				return SandboxInfo{}, fmt.Errorf("%s: the fork made no copy", api.CodeForkFailed)
			}
			return infoOf(res.Copies[0]), nil
		})
	tool(s, "try_in_copy", "Try a step in a copy",
		"Run a risky step in a live copy of the sandbox (offline unless online), then verify. If both pass, the copy replaces the sandbox under the same name (a new id; its checkpoints start again at v0, the disk before the step); if either fails, the copy is deleted and the sandbox is untouched.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in tryIn) (*TryOutput, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			res, err := client.TryInCopy(ctx, sb, in.Step, in.Verify, client.TryOptions{Online: in.Online})
			if err != nil {
				return nil, err
			}
			return &TryOutput{Kept: res.Kept, Sandbox: infoOf(res.Sandbox), Step: execOutput(res.Step), Verify: execOutput(res.Verify)}, nil
		})
	tool(s, "snapshot", "Remember a step",
		"Take a memory snapshot of the running sandbox (disk, memory and processes) as a named step of its chain; go_back_to returns to it. Kept 1 day.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in stepIn) (map[string]any, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			sn, err := client.Remember(ctx, sb, in.Step, client.RememberOptions{})
			if err != nil {
				return nil, err
			}
			return map[string]any{"snapshot": sn.ID, "step": in.Step, "sandbox": sb.Name}, nil
		})
	tool(s, "go_back_to", "Go back to a step",
		"Replace the sandbox by one started from the snapshot of a step (see snapshot): disk, memory and processes as they were then, same name (a new id; its checkpoints start again at v0).",
		func(ctx context.Context, _ *sdk.CallToolRequest, in stepIn) (SandboxInfo, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return SandboxInfo{}, err
			}
			nb, err := client.GoBackTo(ctx, sb, in.Step)
			if err != nil {
				return SandboxInfo{}, err
			}
			return infoOf(nb), nil
		})
	tool(s, "set_network", "Set network rules",
		"Set the sandbox's network rules, enforced on the host: internet false cuts all egress; allow narrows egress to domains or IPv4 CIDRs; deny wins over allow.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in networkIn) (*api.NetworkRules, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			r, err := sb.Network().Set(ctx, api.NetworkRules{Internet: in.Internet, Allow: in.Allow, Deny: in.Deny})
			if err != nil {
				return nil, err
			}
			return &r, nil
		})
	tool(s, "network_log", "Refused connections", "What the host refused for the sandbox (domains, addresses), with counts of what it decided.",
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (*api.NetworkLog, error) {
			sb, err := t.sandbox(ctx, in.Sandbox)
			if err != nil {
				return nil, err
			}
			return sb.Network().Log(ctx)
		})
}
