package cli

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// benchStep is one step of an operation as sbxd reported it in a progress
// line (api.CaptureStepsPrefix, api.StartStepsPrefix, api.DiskStepsPrefix,
// api.ReleaseStepsPrefix):
// its name ("runsc checkpoint", "btrfs snapshot", "disk") and ms.
type benchStep struct {
	Name string  `json:"name"`
	MS   float64 `json:"ms"`
}

// breakdown is where one measured operation's time went: its total as the
// client saw it and the steps sbxd reported.
type breakdown struct {
	Op      string      `json:"op"`
	TotalMS float64     `json:"total_ms"`
	Steps   []benchStep `json:"steps"`
}

// RawMS is the time of the steps that are one runsc call or one btrfs
// ioctl each ("runsc …", "btrfs …"): what the operation is built on.
func (b breakdown) RawMS() float64 {
	var n float64
	for _, s := range b.Steps {
		if strings.HasPrefix(s.Name, "runsc ") || strings.HasPrefix(s.Name, "btrfs ") {
			n += s.MS
		}
	}
	return n
}

// stepRecorder keeps the step lines of an operation's progress.
type stepRecorder struct {
	mu    sync.Mutex
	steps []benchStep
}

// progress is a client.Progress that keeps the steps of lines that begin
// with a steps prefix.
func (r *stepRecorder) progress() client.Progress {
	return func(msg string, _ time.Time) {
		for _, p := range []string{api.CaptureStepsPrefix, api.StartStepsPrefix, api.DiskStepsPrefix, api.ReleaseStepsPrefix} {
			if rest, ok := strings.CutPrefix(msg, p); ok {
				r.mu.Lock()
				r.steps = append(r.steps, parseSteps(rest)...)
				r.mu.Unlock()
			}
		}
	}
}

// take returns the steps kept so far and forgets them.
func (r *stepRecorder) take() []benchStep {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.steps
	r.steps = nil
	return s
}

// parseSteps reads "name N, name N, ..." (N in ms); parts that do not end
// in a number are skipped.
func parseSteps(s string) []benchStep {
	var out []benchStep
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		i := strings.LastIndexByte(part, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(part[i+1:], 64)
		if err != nil {
			continue
		}
		out = append(out, benchStep{Name: part[:i], MS: v})
	}
	return out
}

// printBreakdowns prints where each operation's time went: its total, the
// runsc calls and btrfs ioctls it is built on (their sum, and total/sum)
// and every step. Steps under 10 ms show a tenth of a ms.
func (a *app) printBreakdowns(bs []breakdown) {
	var rows [][]string
	for _, b := range bs {
		raw := b.RawMS()
		ratio := "-"
		if raw > 0 {
			ratio = fmt.Sprintf("%.2f", b.TotalMS/raw)
		}
		var steps []string
		var sum float64
		for _, s := range b.Steps {
			steps = append(steps, s.Name+" "+fmtMS(s.MS))
			sum += s.MS
		}
		steps = append(steps, "rest "+fmtMS(max(0, b.TotalMS-sum)))
		rows = append(rows, []string{b.Op, fmtMS(b.TotalMS), fmtMS(raw), ratio, strings.Join(steps, ", ")})
	}
	fmt.Fprintln(a.stdout)
	fmt.Fprintln(a.stdout, "where the time goes (ms; RAW is the runsc calls and btrfs ioctls the operation is built on, RATIO total/RAW; rest is HTTP, records and waits):")
	a.table("OPERATION\tTOTAL\tRAW\tRATIO\tSTEPS", rows)
}

// fmtMS formats ms: with a tenth under 10 ms, whole above.
func fmtMS(v float64) string {
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return fmt.Sprintf("%.0f", v)
}
