package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// soakKinds are the operations the soak's agents do, in table order.
var soakKinds = []string{"create", "exec", "read", "checkpoint", "restore", "snapshot", "fork", "suspend", "resume", "delete"}

// markerDir holds the marker files the agents write in their sandboxes.
const markerDir = "/soak"

// markerContent is the content of marker file name: derived from the name,
// so a file read back can be checked without remembering it.
func markerContent(name string) string {
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])
	return name + ":" + h[:8+int(sum[0])%56]
}

// markers is what a disk holds of the marker files: name → true when it is
// there for sure, false when it may or may not be (a write or a delete that
// a kill cut short).
type markers map[string]bool

func (m markers) clone() markers {
	c := make(markers, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// sure lists the names surely there, sorted.
func (m markers) sure() []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// mismatch says how the files seen (name → content) differ from m, or ""
// when they are consistent with it.
func (m markers) mismatch(seen map[string]string) string {
	var probs []string
	for name, sure := range m {
		if _, ok := seen[name]; sure && !ok {
			probs = append(probs, "missing "+name)
		}
	}
	for name, content := range seen {
		if _, ok := m[name]; !ok {
			probs = append(probs, "unexpected "+name)
		} else if content != markerContent(name) {
			probs = append(probs, fmt.Sprintf("%s holds %q", name, trunc(content, 80)))
		}
	}
	sort.Strings(probs)
	if len(probs) > 6 {
		probs = append(probs[:6], fmt.Sprintf("and %d more", len(probs)-6))
	}
	return strings.Join(probs, ", ")
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// soakBox is an agent's model of one of its sandboxes.
type soakBox struct {
	name      string
	sb        *client.Sandbox // nil until created
	created   bool            // known to exist
	live      markers
	cps       map[string]markers
	suspended bool
	// pending is the operation a kill cut short ("" if none), with what
	// it would have made: the markers of a checkpoint, of a restored disk,
	// of a snapshot.
	pending        string
	pendingMarkers markers
	diffed         map[string]bool // checkpoints whose content was checked by a diff
}

// soakSnap is a snapshot an agent took, with the markers of its disk.
type soakSnap struct {
	id      string
	from    string
	markers markers
	// deleting: a delete of it was cut by a kill, so it may be gone.
	deleting bool
}

// soakAgent works on its own sandboxes, one operation at a time.
type soakAgent struct {
	s       *soak
	n       int
	rng     *mrand.Rand
	seq     int
	boxes   []*soakBox
	snaps   []*soakSnap
	pending *soakSnap // a snapshot a kill cut short
	// stepEpoch is the kill count when the current step entered the
	// gate: a check at the end of a step (checkLive) that meets a dead
	// sbxd was cut by a kill if the count moved since, even when the kill
	// came between the step's operation and the check.
	stepEpoch int64
}

func newSoakAgent(s *soak, n int, seed uint64) *soakAgent {
	return &soakAgent{s: s, n: n, rng: mrand.New(mrand.NewPCG(seed, uint64(n)))}
}

func (a *soakAgent) newName(prefix string) string {
	a.seq++
	return fmt.Sprintf("%s%d-%d", prefix, a.n, a.seq)
}

func (a *soakAgent) loop(ctx context.Context) {
	for ctx.Err() == nil {
		if !a.s.gate.enter() {
			return
		}
		a.stepEpoch = a.s.epoch.Load()
		a.step(ctx)
		a.s.gate.leave()
	}
}

// outcome classifies an operation's answer.
type outcome string

const (
	outOK          outcome = "ok"
	outConflict    outcome = "conflict"
	outError       outcome = "error"
	outInterrupted outcome = "interrupted"
)

// do runs one operation under the deadline and counts its outcome. An
// operation past its deadline is a violation (a hang); one whose sbxd was
// killed meanwhile and that got no answer was cut by the kill.
func (a *soakAgent) do(ctx context.Context, kind, what string, f func(ctx context.Context) error) (outcome, error) {
	ep := a.s.epoch.Load()
	octx, cancel := context.WithTimeout(ctx, a.s.o.deadline)
	start := time.Now()
	err := f(octx)
	cancel()
	if err == nil {
		a.s.count(kind, "ok", "")
		return outOK, nil
	}
	var ae *client.Error
	isAPI := errors.As(err, &ae)
	if isAPI && ae.Code == api.CodeUnavailable && a.s.epoch.Load() != ep {
		// The client's word for an answer the kill cut (or sbxd's 503
		// while it stopped): not an answer of the API.
		isAPI = false
	}
	switch {
	case !isAPI && a.s.epoch.Load() != ep:
		a.s.count(kind, "interrupted", "")
		return outInterrupted, err
	case !isAPI && octx.Err() != nil && ctx.Err() == nil:
		a.s.violation("%s %s: no answer within %v (a hang): %v", kind, what, time.Since(start).Round(time.Second), err)
		a.s.count(kind, "error", "no answer within the deadline")
		return outError, err
	case !isAPI && ctx.Err() != nil:
		return outInterrupted, err
	case isAPI && ae.Code == api.CodeConflict:
		a.s.count(kind, "conflict", trunc(ae.Message, 200))
		return outConflict, err
	}
	msg := err.Error()
	if isAPI {
		msg = string(ae.Code) + ": " + ae.Message
	}
	a.s.count(kind, "error", trunc(msg, 200))
	a.s.logf("agent %d: %s %s: %v", a.n, kind, what, err)
	return outError, err
}

// step picks one operation at random among those that make sense now.
func (a *soakAgent) step(ctx context.Context) {
	var live []*soakBox
	for _, b := range a.boxes {
		if b.created {
			live = append(live, b)
		}
	}
	room := len(a.boxes) < a.s.o.maxSandboxes
	if len(live) == 0 {
		if room {
			a.create(ctx)
		}
		return
	}
	b := live[a.rng.IntN(len(live))]
	type choice struct {
		w float64
		f func()
	}
	var cs []choice
	add := func(w float64, f func()) {
		if w > 0 {
			cs = append(cs, choice{w, f})
		}
	}
	if room {
		add(1, func() { a.create(ctx) })
		if !b.suspended {
			add(0.7, func() { a.fork(ctx, b) })
		}
	}
	if b.suspended {
		add(3, func() { a.resume(ctx, b) })
		add(1, func() { a.exec(ctx, b) }) // wakes it
		add(0.5, func() { a.delete(ctx, b) })
	} else {
		add(6, func() { a.exec(ctx, b) })
		add(1, func() { a.read(ctx, b) })
		add(3, func() { a.checkpoint(ctx, b) })
		if len(b.cps) > 1 {
			add(2, func() { a.restore(ctx, b) })
		}
		add(1, func() { a.snapshot(ctx, b) })
		add(0.8, func() { a.suspend(ctx, b) })
		add(0.2, func() { a.resume(ctx, b) }) // of a running sandbox: answers at once
		add(0.5, func() { a.delete(ctx, b) })
	}
	var total float64
	for _, c := range cs {
		total += c.w
	}
	x := a.rng.Float64() * total
	for _, c := range cs {
		if x < c.w {
			c.f()
			return
		}
		x -= c.w
	}
}

func (a *soakAgent) labels() map[string]string {
	return map[string]string{"sbx-soak": "1", "agent": fmt.Sprint(a.n)}
}

// create makes a fresh sandbox, or one from a snapshot the agent took.
func (a *soakAgent) create(ctx context.Context) {
	req := api.CreateSandboxRequest{Name: a.newName("sk"), Labels: a.labels()}
	m := markers{}
	var from *soakSnap
	if len(a.snaps) > 0 && a.rng.IntN(3) == 0 {
		from = a.snaps[a.rng.IntN(len(a.snaps))]
		req.Snapshot = from.id
		m = from.markers.clone()
	} else {
		req.Image = a.s.o.image
	}
	b := &soakBox{name: req.Name, live: m, cps: map[string]markers{"v0": m.clone()}, diffed: map[string]bool{}}
	a.boxes = append(a.boxes, b)
	var sb *client.Sandbox
	out, err := a.do(ctx, "create", req.Name, func(ctx context.Context) error {
		var err error
		sb, err = a.s.c.Sandboxes.Create(ctx, req)
		return err
	})
	switch out {
	case outOK:
		b.sb, b.created = sb, true
		if from != nil {
			a.checkLive(ctx, b, "created from snapshot "+from.id)
		}
	case outInterrupted:
		b.pending = "create"
	default:
		if from != nil && errors.Is(err, client.ErrSnapshotNotFound) {
			a.s.violation("create %s from snapshot %s (taken by agent %d, never deleted): %v", req.Name, from.id, a.n, err)
		}
		a.forget(b)
	}
}

func (a *soakAgent) forget(b *soakBox) {
	for i, x := range a.boxes {
		if x == b {
			a.boxes = append(a.boxes[:i], a.boxes[i+1:]...)
			return
		}
	}
}

// exec writes a new marker file (atomically: a temp file renamed), or
// deletes one.
func (a *soakAgent) exec(ctx context.Context, b *soakBox) {
	var cmd, name string
	del := false
	if sure := b.live.sure(); len(sure) > 0 && a.rng.IntN(5) == 0 {
		name, del = sure[a.rng.IntN(len(sure))], true
		cmd = fmt.Sprintf("rm %s/%s", markerDir, name)
	} else {
		name = a.newName("m-a")
		cmd = fmt.Sprintf("mkdir -p %[1]s && printf %%s '%[2]s' > %[1]s/.%[3]s.tmp && mv %[1]s/.%[3]s.tmp %[1]s/%[3]s",
			markerDir, markerContent(name), name)
	}
	var res *client.ExecResult
	out, _ := a.do(ctx, "exec", b.name, func(ctx context.Context) error {
		var err error
		res, err = b.sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", cmd}, TimeoutMS: 60000})
		return err
	})
	switch out {
	case outOK:
		b.suspended = false
		if res.ExitCode != 0 {
			a.s.violation("exec in %s: %q exited %d: %s", b.name, cmd, res.ExitCode, trunc(res.Stderr, 200))
			b.live[name] = false
			b.pending = "exec"
			return
		}
		if del {
			delete(b.live, name)
		} else {
			b.live[name] = true
		}
	case outConflict:
	default:
		// Done or not: find out after the restart.
		b.live[name] = false
		b.pending = "exec"
	}
}

// readMarkers reads the marker files of b (booting or waking it).
func (a *soakAgent) readMarkers(ctx context.Context, b *soakBox) (map[string]string, error) {
	res, err := b.sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c",
		`for f in ` + markerDir + `/m-*; do [ -f "$f" ] || continue; printf '%s %s\n' "${f##*/}" "$(cat "$f")"; done`}, TimeoutMS: 60000})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("reading the markers exited %d: %s", res.ExitCode, res.Stderr)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if n, c, ok := strings.Cut(line, " "); ok {
			seen[n] = c
		}
	}
	return seen, nil
}

// read checks the live disk against the model.
func (a *soakAgent) read(ctx context.Context, b *soakBox) {
	var seen map[string]string
	out, _ := a.do(ctx, "read", b.name, func(ctx context.Context) error {
		var err error
		seen, err = a.readMarkers(ctx, b)
		return err
	})
	if out != outOK {
		return
	}
	b.suspended = false
	if p := b.live.mismatch(seen); p != "" {
		a.s.violation("sandbox %s: its disk is not what was written: %s", b.name, p)
	}
	b.live = markers{}
	for n := range seen {
		b.live[n] = true
	}
}

// checkLive reads the markers after an operation that set the disk and
// checks them (a violation when they differ).
func (a *soakAgent) checkLive(ctx context.Context, b *soakBox, after string) {
	rctx, cancel := context.WithTimeout(ctx, a.s.o.deadline)
	defer cancel()
	seen, err := a.readMarkers(rctx, b)
	if err != nil {
		if a.s.epoch.Load() == a.stepEpoch && ctx.Err() == nil {
			a.s.violation("sandbox %s: reading its files %s: %v", b.name, after, err)
		}
		b.pending = "exec"
		for n := range b.live {
			b.live[n] = false
		}
		return
	}
	if p := b.live.mismatch(seen); p != "" {
		a.s.violation("sandbox %s %s: %s", b.name, after, p)
	}
	b.live = markers{}
	for n := range seen {
		b.live[n] = true
	}
}

func (a *soakAgent) checkpoint(ctx context.Context, b *soakBox) {
	var cp *api.Checkpoint
	at := b.live.clone()
	out, _ := a.do(ctx, "checkpoint", b.name, func(ctx context.Context) error {
		var err error
		cp, err = b.sb.Checkpoint(ctx, "soak")
		return err
	})
	switch out {
	case outOK:
		if _, dup := b.cps[cp.ID]; dup {
			a.s.violation("sandbox %s: checkpoint answered id %s, which it already had", b.name, cp.ID)
		}
		b.cps[cp.ID] = at
	case outInterrupted:
		b.pending, b.pendingMarkers = "checkpoint", at
	}
}

func (a *soakAgent) restore(ctx context.Context, b *soakBox) {
	ids := make([]string, 0, len(b.cps))
	for id := range b.cps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	id := ids[a.rng.IntN(len(ids))]
	out, _ := a.do(ctx, "restore", b.name+" "+id, func(ctx context.Context) error {
		return b.sb.Restore(ctx, id, nil)
	})
	switch out {
	case outOK:
		b.live = b.cps[id].clone()
		a.checkLive(ctx, b, "after restoring "+id)
	case outInterrupted:
		b.pending, b.pendingMarkers = "restore", b.cps[id].clone()
	}
}

func (a *soakAgent) snapshot(ctx context.Context, b *soakBox) {
	at := b.live.clone()
	var sn *api.Snapshot
	out, _ := a.do(ctx, "snapshot", b.name, func(ctx context.Context) error {
		var err error
		sn, err = b.sb.Snapshot(ctx, api.SnapshotRequest{Name: "soak"})
		return err
	})
	switch out {
	case outOK:
		a.snaps = append(a.snaps, &soakSnap{id: sn.ID, from: b.name, markers: at})
		// Keep two: deleting the oldest exercises snapshot deletion.
		if len(a.snaps) > 2 {
			old := a.snaps[0]
			o, err := a.do(ctx, "delete", "snapshot "+old.id, func(ctx context.Context) error {
				return a.s.c.Snapshots.Delete(ctx, old.id)
			})
			switch {
			case o == outOK || errors.Is(err, client.ErrSnapshotNotFound):
				a.snaps = a.snaps[1:]
			case o == outInterrupted:
				old.deleting = true
			}
		}
	case outInterrupted:
		a.pending = &soakSnap{from: b.name, markers: at}
	}
}

func (a *soakAgent) fork(ctx context.Context, b *soakBox) {
	name := a.newName("fk")
	at := b.live.clone()
	nb := &soakBox{name: name, live: at, cps: map[string]markers{"v0": at.clone()}, diffed: map[string]bool{}}
	a.boxes = append(a.boxes, nb)
	var res *client.ForkResult
	out, _ := a.do(ctx, "fork", b.name+" → "+name, func(ctx context.Context) error {
		var err error
		res, err = b.sb.Fork(ctx, api.ForkRequest{Name: name, Labels: a.labels()})
		if err == nil && res.Errors[0] != nil {
			return res.Errors[0]
		}
		return err
	})
	switch out {
	case outOK:
		nb.sb, nb.created = res.Copies[0], true
		a.checkLive(ctx, nb, "forked from "+b.name)
	case outInterrupted:
		nb.pending = "create"
	default:
		a.forget(nb)
	}
}

func (a *soakAgent) suspend(ctx context.Context, b *soakBox) {
	out, _ := a.do(ctx, "suspend", b.name, func(ctx context.Context) error { return b.sb.Suspend(ctx, "") })
	switch out {
	case outOK:
		b.suspended = true
	case outInterrupted:
		b.pending = "suspend"
	}
}

func (a *soakAgent) resume(ctx context.Context, b *soakBox) {
	out, _ := a.do(ctx, "resume", b.name, func(ctx context.Context) error { return b.sb.Resume(ctx) })
	switch out {
	case outOK:
		b.suspended = false
	case outInterrupted:
		b.pending = "resume"
	}
}

func (a *soakAgent) delete(ctx context.Context, b *soakBox) {
	out, err := a.do(ctx, "delete", b.name, func(ctx context.Context) error { return a.s.c.Sandboxes.Delete(ctx, b.sb.ID) })
	switch {
	case out == outOK:
		a.forget(b)
	case out == outInterrupted:
		b.pending = "delete"
	case errors.Is(err, client.ErrSandboxNotFound):
		a.s.violation("delete %s: it is gone, but nothing deleted it: %v", b.name, err)
		a.forget(b)
	}
}
