package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a long operation: a spinner with the elapsed time and the
// latest progress line on a terminal, plain lines otherwise.
type progress struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	start time.Time
	tty   bool
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, what string) *progress {
	p := &progress{w: w, start: time.Now(), tty: isTerminal(w)}
	if p.tty {
		p.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(what),
			progressbar.OptionSpinnerType(14),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond),
		)
	} else {
		fmt.Fprintln(w, what)
	}
	return p
}

func (p *progress) update(msg string) {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return
	}
	if p.tty {
		if len(msg) > 70 {
			msg = msg[:67] + "..."
		}
		p.bar.Describe(msg)
		_ = p.bar.Add(1)
		return
	}
	fmt.Fprintf(p.w, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), msg)
}

func (p *progress) done(ok bool) {
	if p.tty {
		_ = p.bar.Finish()
	}
	status := "done"
	if !ok {
		status = "failed"
	}
	fmt.Fprintf(p.w, "%s in %.1fs\n", status, time.Since(p.start).Seconds())
}
