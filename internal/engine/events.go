package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/store"
)

// MaxEventBytes bounds an event's body: 1 MiB.
const MaxEventBytes = 1 << 20

// DefaultEventRetention is how long an event that no sandbox waits for is
// kept for one that suspends on its key later: 24 h.
const DefaultEventRetention = 24 * time.Hour

func newEventID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// PostedEvent is what PostEvent did with an event.
type PostedEvent struct {
	Event *store.Event
	// Woken are the sandboxes it was delivered to; they resume in the
	// background.
	Woken []*store.Sandbox
}

// PostEvent delivers an event to every sandbox suspended with wake_on ==
// key and resumes them (in the background); when none waits, it is kept
// (EventRetention) and delivered to the first sandbox that suspends on the
// key, which then resumes at once.
//
// Errors: ErrInvalidArgument (key); ErrTooLarge (data over MaxEventBytes).
func (e *Engine) PostEvent(ctx context.Context, key string, data []byte, contentType string) (*PostedEvent, error) {
	if err := validateWakeKey("key", key); err != nil {
		return nil, err
	}
	if len(data) > MaxEventBytes {
		return nil, errdefs.New(errdefs.ErrTooLarge, "an event's body is at most %d bytes", MaxEventBytes)
	}
	ctx = context.WithoutCancel(ctx)
	sbs, err := e.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	out := &PostedEvent{}
	id := newEventID()
	for _, sb := range sbs {
		if sb.State != api.StateSuspended || sb.WakeOn != key {
			continue
		}
		ev := &store.Event{ID: id, Key: key, SandboxID: sb.ID, Data: data, ContentType: contentType, CreateTime: now, DeliverTime: now}
		if len(out.Woken) > 0 {
			ev.ID = newEventID()
		}
		if err := e.st.AddEvent(ctx, ev); err != nil {
			return nil, err
		}
		out.Event = ev
		out.Woken = append(out.Woken, sb)
		e.resumeAsync(sb.ID, "event "+key)
	}
	if len(out.Woken) == 0 {
		retention := e.cfg.EventRetention
		if retention <= 0 {
			retention = DefaultEventRetention
		}
		ev := &store.Event{ID: id, Key: key, Data: data, ContentType: contentType, CreateTime: now, ExpireTime: now.Add(retention)}
		if err := e.st.AddEvent(ctx, ev); err != nil {
			return nil, err
		}
		out.Event = ev
		// A sandbox may have suspended on the key between the list and the
		// insert: it takes the event now.
		for _, sb := range sbs {
			if cur, err := e.st.GetSandbox(ctx, sb.ID); err == nil && cur.State == api.StateSuspended && cur.WakeOn == key {
				e.deliverPending(ctx, cur)
			}
		}
	}
	return out, nil
}

// deliverPending gives a sandbox suspended on a key the events posted to
// it before (no lost approvals when the event races the suspend) and
// resumes it if there were any.
func (e *Engine) deliverPending(ctx context.Context, sb *store.Sandbox) {
	if sb.WakeOn == "" {
		return
	}
	evs, err := e.st.TakePending(context.WithoutCancel(ctx), sb.WakeOn, sb.ID, time.Now().UTC())
	if err != nil {
		e.log.Warn("deliver pending events", "sandbox", sb.Name, "err", err)
		return
	}
	if len(evs) > 0 {
		e.resumeAsync(sb.ID, "event "+sb.WakeOn)
	}
}

// resumeAsync resumes sandbox id in the background.
func (e *Engine) resumeAsync(id, why string) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		sb, err := e.Resume(e.ctx, id, nil)
		if err != nil {
			e.log.Error("wake", "sandbox", id, "why", why, "err", err)
			return
		}
		e.log.Info("woken", "sandbox", sb.Name, "why", why)
	}()
}

// Events returns the events delivered to a sandbox, oldest first.
//
// Errors: ErrSandboxNotFound.
func (e *Engine) Events(ctx context.Context, idOrName string) ([]*store.Event, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	return e.st.ListEvents(ctx, sb.ID)
}
