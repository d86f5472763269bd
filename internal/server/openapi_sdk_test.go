package server

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The TypeScript and Python SDKs' wire types against the document: a field
// an SDK reads or sends is a property of the schema it mirrors, and a
// property an SDK leaves out is listed here, so that a field added to the
// API (to Go and the document, TestOpenAPIMatchesGoTypes) is not silently
// missing from an SDK.

// sdkTypes maps an SDK type to the schema it mirrors.
var (
	tsTypes = map[string]string{
		"NetworkRules": "NetworkRules", "Volume": "Volume", "SandboxSource": "Source", "SandboxInfo": "Sandbox",
		"CreateSandboxRequest": "CreateSandboxRequest", "UpdateSandboxRequest": "UpdateSandboxRequest",
		"ExecUndo": "UndoResult", "ExecRequest": "ExecRequest", "ExecResult": "ExecResult", "FileInfo": "FileInfo",
		"WriteFileResult": "FileWritten", "Checkpoint": "Checkpoint", "Change": "Change", "Diff": "Diff",
		"Snapshot": "Snapshot", "SnapshotRequest": "SnapshotRequest", "ForkRequest": "ForkRequest",
		"ErrorBody": "ErrorBody", "ForkResultWire": "ForkResult", "NetworkCounts": "NetworkCounts",
		"NetworkRefusal": "NetworkRefusal", "NetworkLog": "NetworkLog", "SbxEvent": "Event",
		"EventResult": "EventResult", "ProcessInfo": "Process", "Port": "Port", "Health": "Health", "Image": "Image",
		"DeliveryRequest": "DeliveryRequest", "Delivery": "Delivery", "Teardown": "Teardown",
		"CreateKeyRequest": "CreateKeyRequest", "Key": "Key", "CreatedKey": "CreatedKey",
		"Secret": "Secret", "SecretRule": "SecretRule", "SecretInfo": "SecretInfo", "SecretUse": "SecretUse",
	}
	pyTypes = map[string]string{
		"NetworkRules": "NetworkRules", "Volume": "Volume", "Source": "Source", "SandboxInfo": "Sandbox",
		"UndoInfo": "UndoResult", "ExecResult": "ExecResult", "ExecEvent": "ExecEvent", "FileInfo": "FileInfo",
		"Checkpoint": "Checkpoint", "Change": "Change", "Diff": "Diff", "Snapshot": "Snapshot", "Process": "Process",
		"Port": "Port", "NetworkCounts": "NetworkCounts", "NetworkRefusal": "NetworkRefusal",
		"NetworkLog": "NetworkLog", "Event": "Event", "EventResult": "EventResult", "Image": "Image", "Health": "Health",
		"Delivery": "Delivery", "Teardown": "Teardown", "Key": "Key", "CreatedKey": "CreatedKey",
		"Secret": "Secret", "SecretRule": "SecretRule", "SecretInfo": "SecretInfo", "SecretUse": "SecretUse",
	}
)

// sdkOmits are the properties an SDK type leaves out, on purpose or not
// yet: "SDK.Type": properties.
var sdkOmits = map[string][]string{
	// Not yet read by the SDKs: the record of a git undo.
	"TypeScript.ExecUndo": {"git"},
	"Python.UndoInfo":     {"git"},
	// POST .../exec refuses tty: the terminal is its own route.
	"TypeScript.ExecRequest": {"tty"},
	// Not yet read by the SDKs: the disk layers and the host's capacity.
	"TypeScript.Health": {"capacity", "checkpoints", "default_disk_mb", "disk_quota", "layers", "layers_note", "platform", "platform_reason"},
	"Python.Health":     {"capacity", "checkpoints", "default_disk_mb", "disk_quota", "layers", "layers_note", "platform", "platform_reason"},
}

// tsFields parses the interfaces of a TypeScript file: name → field names.
func tsFields(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	field := regexp.MustCompile(`(?m)^  (\w+)\??:`)
	for _, m := range regexp.MustCompile(`(?ms)^export interface (\w+) \{\n(.*?)^\}`).FindAllStringSubmatch(string(b), -1) {
		for _, f := range field.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], f[1])
		}
	}
	return out
}

// pyFields parses the dataclasses of a Python file: name → JSON member
// names (a field's _json("x") metadata names its member; _json(None) and
// raw are not read from the JSON).
func pyFields(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	field := regexp.MustCompile(`(?m)^    (\w+): [^\n]*$`)
	jsonName := regexp.MustCompile(`_json\(("(\w+)"|None)\)`)
	head := regexp.MustCompile(`^(\w+)\(_Model\):\n`)
	for _, part := range strings.Split(string(b), "\n@dataclass\nclass ")[1:] {
		m := head.FindStringSubmatch(part)
		if m == nil {
			continue
		}
		body := part[len(m[0]):]
		if i := regexp.MustCompile(`(?m)^\S`).FindStringIndex(body); i != nil {
			body = body[:i[0]] // the class ends at the next unindented line
		}
		for _, f := range field.FindAllStringSubmatch(body, -1) {
			name := f[1]
			if name == "raw" {
				continue
			}
			if j := jsonName.FindStringSubmatch(f[0]); j != nil {
				if j[1] == "None" {
					continue
				}
				name = j[2]
			}
			out[m[1]] = append(out[m[1]], name)
		}
	}
	return out
}

func TestOpenAPISDKTypes(t *testing.T) {
	doc := loadSpec(t)
	for _, sdk := range []struct {
		name   string
		fields map[string][]string
		types  map[string]string
	}{
		{"TypeScript", tsFields(t, "../../sdk/typescript/src/types.ts"), tsTypes},
		{"Python", pyFields(t, "../../sdk/python/sbx/types.py"), pyTypes},
	} {
		for typ, schema := range sdk.types {
			have, ok := sdk.fields[typ]
			if !ok {
				t.Errorf("%s: no type %s (mirroring %s) in the SDK; update the map", sdk.name, typ, schema)
				continue
			}
			props := doc.Components.Schemas[schema].Value.Properties
			for _, f := range have {
				if props[f] == nil {
					t.Errorf("%s %s: field %q is not a property of %s in api/openapi.yaml", sdk.name, typ, f, schema)
				}
			}
			var missing []string
			for p := range props {
				if !slices.Contains(have, p) {
					missing = append(missing, p)
				}
			}
			sort.Strings(missing)
			key := sdk.name + "." + typ
			if want := sdkOmits[key]; !slices.Equal(missing, want) {
				t.Errorf("%s lacks %s of %s; sdkOmits lists %s", key, strings.Join(missing, ", "), schema, strings.Join(want, ", "))
			}
		}
	}
}
