package engine

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxhq/sbx/internal/errdefs"
)

// hangDeadline detects a hang: a test that waits this long has failed.
const hangDeadline = 30 * time.Second

// TestForEachLimitRunsAtOnce: the first limit calls all run at the same
// time (each waits until all of them have started), and never more than
// limit do. Run one after another, the first call would wait forever.
func TestForEachLimitRunsAtOnce(t *testing.T) {
	const n, limit = 20, 8
	var running, most atomic.Int32
	allStarted := make(chan struct{})
	var started atomic.Int32
	done := make(chan struct{})
	go func() {
		forEachLimit(n, limit, func(i int) {
			r := running.Add(1)
			for {
				m := most.Load()
				if r <= m || most.CompareAndSwap(m, r) {
					break
				}
			}
			if started.Add(1) == limit {
				close(allStarted)
			}
			if i < limit {
				<-allStarted
			}
			running.Add(-1)
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangDeadline):
		t.Fatalf("forEachLimit did not return: %d of the first %d calls started, so they do not run at once", started.Load(), limit)
	}
	if m := most.Load(); m > limit {
		t.Fatalf("%d calls ran at once, more than the limit %d", m, limit)
	}
	if got := started.Load(); got != n {
		t.Fatalf("%d calls made, want %d", got, n)
	}
}

// TestForEachLimitHangHoldsOnlyItsWorker: a call that blocks (a hung
// sandbox's recovery) does not keep the other calls from finishing.
func TestForEachLimitHangHoldsOnlyItsWorker(t *testing.T) {
	const n = 12
	var wg sync.WaitGroup
	wg.Add(n - 1)
	othersDone := make(chan struct{})
	go func() { wg.Wait(); close(othersDone) }()
	done := make(chan struct{})
	go func() {
		forEachLimit(n, 4, func(i int) {
			if i == 0 {
				<-othersDone // hangs until every other call has returned
				return
			}
			wg.Done()
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangDeadline):
		t.Fatal("the other calls waited for the blocked one")
	}
}

// syncBuffer is a log sink that a test reads while the engine writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func lockTestEngine(w io.Writer) *Engine {
	return &Engine{
		log: slog.New(slog.NewTextHandler(w, nil))}
}

// TestDeleteWaitsForOperation: a delete while another operation (a boot)
// holds the sandbox waits for it instead of answering conflict; with no
// wait allowed (the warm pool's discards) it stays a conflict.
func TestDeleteWaitsForOperation(t *testing.T) {
	var logs syncBuffer
	e := lockTestEngine(&logs)
	unlockBoot, err := e.lockID(context.Background(), "sbx_1", "a", "boot", lockOrConflict)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lockForDelete(context.Background(), "sbx_1", "a", 0); !errdefs.IsConflict(err) {
		t.Fatalf("delete without a wait while a boot runs: %v, want conflict", err)
	}
	got := make(chan error, 1)
	go func() {
		unlock, err := e.lockForDelete(context.Background(), "sbx_1", "a", hangDeadline)
		if err == nil {
			unlock()
		}
		got <- err
	}()
	// Once the delete waits, the boot ends.
	deadline := time.Now().Add(hangDeadline)
	for !strings.Contains(logs.String(), "delete: waiting for the operation in progress") {
		if time.Now().After(deadline) {
			t.Fatalf("the delete does not wait for the boot; log: %s", logs.String())
		}
		time.Sleep(time.Millisecond)
	}
	unlockBoot()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("delete after the boot ended: %v", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("the delete did not get the lock once the boot ended")
	}
}

// TestDeleteWaitIsBounded: an operation that outlasts the wait makes the
// delete a conflict naming it, not a hang.
func TestDeleteWaitIsBounded(t *testing.T) {
	e := lockTestEngine(io.Discard)
	unlock, err := e.lockID(context.Background(), "sbx_1", "a", "restore", lockOrConflict)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = e.lockForDelete(context.Background(), "sbx_1", "a", 50*time.Millisecond)
	if !errdefs.IsConflict(err) {
		t.Fatalf("delete behind a restore that does not end: %v, want conflict", err)
	}
	t.Log(err)
}
