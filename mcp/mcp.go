// Package mcp serves sbx as Model Context Protocol tools
// (https://modelcontextprotocol.io), so that any agent that speaks MCP gets
// sandboxes with a real undo: run commands, read and write files, take
// disk checkpoints and restore them, try a risky step in a live copy,
// keep a chain of memory snapshots and go back to a step, and narrow the
// network.
//
// The tools call sbxd through a client.Client: `sbx mcp` serves them over
// stdio with the CLI's client, and sbxd serves them at /v1/mcp (streamable
// HTTP, stateless) with a client that carries the caller's API key, so
// the API's rules apply unchanged. It is built on the official MCP Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// A tool that fails answers a tool error (isError), whose text starts with
// the API's error code and ends with what the model can do next.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// MaxOutputBytes is the most bytes of a command's stdout, and of its
// stderr, that the exec tools hand to the model; the rest is cut, and the
// answer says how much.
const MaxOutputBytes = 64 << 10

// MaxReadBytes is the largest file read_file returns.
const MaxReadBytes = 1 << 20

// schemas is shared by the servers made per HTTP request (stateless).
var schemas = sdk.NewSchemaCache()

// NewServer returns an MCP server whose tools act through c. version is
// sbx's version, reported to the client as the server's.
func NewServer(c *client.Client, version string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "sbx", Title: "sbx sandboxes", Version: version},
		&sdk.ServerOptions{
			Instructions: "sbx runs commands in isolated sandboxes with a real undo. Create a sandbox " +
				"(create_sandbox), run commands in it (exec; undo \"auto\" takes a checkpoint or snapshot " +
				"before a risky command and rolls it back if the command fails), take checkpoints before " +
				"risky steps and restore them, or try a step in a live copy (try_in_copy).",
			SchemaCache: schemas,
		})
	t := &tools{c: c}
	t.add(s)
	s.AddReceivingMiddleware(argErrorsSayWhatNext)
	return s
}

// toolArgs maps a tool's name to the text that names its arguments
// ("sandbox (required), command (required), cwd"), for argument errors.
var toolArgs sync.Map

// argsOf names the arguments of a tool whose input is t (a struct): each
// field's JSON name, "(required)" when it has no omitempty.
func argsOf(t reflect.Type) string {
	if t.Kind() != reflect.Struct {
		return ""
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			name += " (required)"
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// argErrorsSayWhatNext is a receiving middleware: the SDK checks a tool
// call's arguments against the tool's input schema before the tool runs
// and answers a tool error of its own ("validating \"arguments\": ...").
// It gets the code invalid_argument first and a Next: that names the
// tool's arguments, as the tools' own errors do.
func argErrorsSayWhatNext(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*sdk.CallToolResult)
		if err != nil || method != "tools/call" || !ok || !r.IsError || len(r.Content) != 1 {
			return res, err
		}
		tc, ok := r.Content[0].(*sdk.TextContent)
		if !ok || !(strings.HasPrefix(tc.Text, `validating "arguments"`) || strings.HasPrefix(tc.Text, "json: ")) {
			return res, err
		}
		cr, ok := req.(*sdk.CallToolRequest)
		if !ok || cr.Params == nil {
			return res, err
		}
		args, _ := toolArgs.Load(cr.Params.Name)
		tc.Text = fmt.Sprintf("%s: %s. Next: call %s again with only its arguments: %v (tools/list has their schema)",
			api.CodeInvalidArgument, tc.Text, cr.Params.Name, args)
		return res, err
	}
}

// Handler serves MCP over streamable HTTP (stateless: every request stands
// alone). clientFor gives the client a request acts through, e.g. one that
// carries the request's API key; a nil client answers 400.
func Handler(clientFor func(r *http.Request) *client.Client, version string) http.Handler {
	return sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		c := clientFor(r)
		if c == nil {
			return nil
		}
		return NewServer(c, version)
	}, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: false})
}

type tools struct{ c *client.Client }

// progress reports an operation's progress lines to the client when the
// call asked for progress (a progress token), else drops them.
func progress(ctx context.Context, req *sdk.CallToolRequest) client.Progress {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return nil
	}
	var n atomic.Int64
	return func(msg string, _ time.Time) {
		_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
			ProgressToken: tok, Message: msg, Progress: float64(n.Add(1)),
		})
	}
}

// toolError turns an error of the API into the text a model reads: the
// code, the message, and what to do next.
func toolError(err error) error {
	var ae *client.Error
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) {
			return err
		}
		// No answer from sbxd at all (it is not running, or the socket or
		// URL is wrong): the model should not retry at once.
		return fmt.Errorf("%s: sbxd did not answer: %v. Next: sbx cannot reach sbxd; ask the user to check that it runs (sbx version), then retry",
			api.CodeUnavailable, err)
	}
	hint := ""
	switch ae.Code {
	case api.CodeSandboxNotFound:
		hint = "list_sandboxes shows the sandboxes there are; create_sandbox makes one"
	case api.CodeCheckpointNotFound:
		hint = "list_checkpoints shows the checkpoint ids (v0, v1, ...)"
	case api.CodeSnapshotNotFound:
		hint = "take a step's snapshot first with snapshot (step name), then go_back_to that name"
	case api.CodeSandboxHasVolume:
		hint = "take a disk checkpoint instead (checkpoint), or use undo \"checkpoint\""
	case api.CodeQuotaExceeded:
		hint = "delete sandboxes or snapshots that are no longer needed, or wait"
	case api.CodeInvalidArgument:
		hint = "fix the argument the message names and call again"
	case api.CodeConflict:
		switch {
		case strings.Contains(ae.Message, "is suspended"):
			hint = "the sandbox is suspended: it resumes on the next exec (or file tool), then retry"
		case strings.Contains(ae.Message, "in progress"):
			hint = "another operation runs on this sandbox: retry in a few seconds"
		default:
			hint = "the sandbox's state does not allow this: get its state with list_sandboxes"
		}
	case api.CodeUnavailable:
		hint = "the sandbox does not answer: retry once; if it persists, restore a checkpoint"
	}
	if hint == "" {
		return fmt.Errorf("%s: %s", ae.Code, ae.Message)
	}
	return fmt.Errorf("%s: %s. Next: %s", ae.Code, ae.Message, hint)
}

// cut keeps the first MaxOutputBytes of s, on a UTF-8 boundary.
func cut(s string) (string, int) {
	if len(s) <= MaxOutputBytes {
		return s, 0
	}
	n := MaxOutputBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], len(s) - n
}
