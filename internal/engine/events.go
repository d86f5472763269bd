package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
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

// EventLimits bound stored events, in count and in bytes of bodies. A
// post that would pass one is refused with ErrQuota (429
// quota_exceeded), naming the limit.
// In sbxd's config file they are "event_limits": {"per_key_count": 100,
// ...}.
type EventLimits struct {
	// PerKeyCount and PerKeyBytes bound the pending events of one key.
	PerKeyCount int   `json:"per_key_count"`
	PerKeyBytes int64 `json:"per_key_bytes"`
	// PerSandboxCount and PerSandboxBytes bound the events delivered to
	// one sandbox (kept until it is deleted).
	PerSandboxCount int   `json:"per_sandbox_count"`
	PerSandboxBytes int64 `json:"per_sandbox_bytes"`
	// TotalCount and TotalBytes bound all events, pending and delivered.
	TotalCount int   `json:"total_count"`
	TotalBytes int64 `json:"total_bytes"`
}

// DefaultEventLimits: 100 pending events or 16 MiB per key, 1000 events
// or 64 MiB per sandbox, 10000 events or 256 MiB in all.
var DefaultEventLimits = EventLimits{
	PerKeyCount: 100, PerKeyBytes: 16 << 20,
	PerSandboxCount: 1000, PerSandboxBytes: 64 << 20,
	TotalCount: 10000, TotalBytes: 256 << 20,
}

// withDefaults fills zero fields from DefaultEventLimits.
func (l EventLimits) withDefaults() EventLimits {
	d := DefaultEventLimits
	if l.PerKeyCount > 0 {
		d.PerKeyCount = l.PerKeyCount
	}
	if l.PerKeyBytes > 0 {
		d.PerKeyBytes = l.PerKeyBytes
	}
	if l.PerSandboxCount > 0 {
		d.PerSandboxCount = l.PerSandboxCount
	}
	if l.PerSandboxBytes > 0 {
		d.PerSandboxBytes = l.PerSandboxBytes
	}
	if l.TotalCount > 0 {
		d.TotalCount = l.TotalCount
	}
	if l.TotalBytes > 0 {
		d.TotalBytes = l.TotalBytes
	}
	return d
}

// MaxEventPage bounds a page of events: at most MaxEventPage events, and
// the page ends after the event whose body brings it to EventPageBytes.
// DefaultEventPage is the count when the caller gives none.
const (
	MaxEventPage     = 1000
	DefaultEventPage = 100
	EventPageBytes   = 4 << 20
)

// checkEventRoom refuses an event of size bytes that would pass a limit
// of what q selects (what names it in the message).
func (e *Engine) checkEventRoom(ctx context.Context, q store.EventQuery, what string, maxCount int, maxBytes, size int64) error {
	n, b, err := e.st.CountEvents(ctx, q)
	if err != nil {
		return err
	}
	if n+1 > maxCount || b+size > maxBytes {
		return errdefs.New(errdefs.ErrQuota, "%s holds %d events of %d bytes; the limit is %d events or %d bytes: cancel pending events (DELETE /v1/events/{id}) or let them expire", what, n, b, maxCount, maxBytes)
	}
	return nil
}

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
// Errors: ErrInvalidArgument (key); ErrTooLarge (data over MaxEventBytes);
// ErrQuota (EventLimits: the key's pending events, a woken sandbox's
// events, or all events would pass their limit; nothing is stored).
func (e *Engine) PostEvent(ctx context.Context, key string, data []byte, contentType string) (*PostedEvent, error) {
	if err := validateWakeKey("key", key); err != nil {
		return nil, err
	}
	if len(data) > MaxEventBytes {
		return nil, errdefs.New(errdefs.ErrTooLarge, "an event's body is at most %d bytes", MaxEventBytes)
	}
	ctx = context.WithoutCancel(ctx)
	// A tenant's event wakes and reaches only its own sandboxes.
	c := CallerOf(ctx)
	e.eventsMu.Lock()
	defer e.eventsMu.Unlock()
	// Only the sandboxes waiting on the key are read (an index), not
	// every sandbox (docs/scale.md).
	waitingOn := store.SandboxFilter{Owners: c.owners(), WakeOn: key}
	waiting, err := e.st.ListSandboxes(ctx, waitingOn)
	if err != nil {
		return nil, err
	}
	lim := e.cfg.EventLimits.withDefaults()
	size := int64(len(data))
	n := max(len(waiting), 1)
	if err := e.checkEventRoom(ctx, store.EventQuery{}, "sbxd", lim.TotalCount-n+1, lim.TotalBytes-int64(n-1)*size, size); err != nil {
		return nil, err
	}
	if len(waiting) == 0 {
		if err := e.checkEventRoom(ctx, store.EventQuery{Pending: true, Key: key, Owners: []string{c.eventOwner()}}, fmt.Sprintf("key %q", key), lim.PerKeyCount, lim.PerKeyBytes, size); err != nil {
			return nil, err
		}
	}
	for _, sb := range waiting {
		if err := e.checkEventRoom(ctx, store.EventQuery{SandboxID: sb.ID}, "sandbox "+sb.Name, lim.PerSandboxCount, lim.PerSandboxBytes, size); err != nil {
			return nil, err
		}
	}
	now := time.Now().UTC()
	out := &PostedEvent{}
	id := newEventID()
	for _, sb := range waiting {
		ev := &store.Event{ID: id, Key: key, SandboxID: sb.ID, Data: data, ContentType: contentType, CreateTime: now, DeliverTime: now,
			Owner: c.eventOwner()}
		if len(out.Woken) > 0 {
			ev.ID = newEventID()
		}
		if err := e.st.AddEvent(ctx, ev); err != nil {
			return nil, err
		}
		out.Event = ev
		out.Woken = append(out.Woken, sb)
		e.wake(ctx, sb, "event "+key)
	}
	if len(out.Woken) == 0 {
		retention := e.cfg.EventRetention
		if retention <= 0 {
			retention = DefaultEventRetention
		}
		ev := &store.Event{ID: id, Key: key, Data: data, ContentType: contentType, CreateTime: now, ExpireTime: now.Add(retention),
			Owner: c.eventOwner()}
		if err := e.st.AddEvent(ctx, ev); err != nil {
			return nil, err
		}
		out.Event = ev
		// A sandbox may have suspended on the key between the list and the
		// insert: it takes the event now.
		if late, err := e.st.ListSandboxes(ctx, waitingOn); err == nil {
			for _, sb := range late {
				e.deliverPending(ctx, sb)
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
	// It takes the events of its owner and the operator's (Caller.eventOwner).
	evs, err := e.st.TakePending(context.WithoutCancel(ctx), sb.WakeOn, sb.ID, []string{"", sb.Owner}, time.Now().UTC())
	if err != nil {
		e.log.Warn("deliver pending events", "sandbox", sb.Name, "err", err)
		return
	}
	if len(evs) > 0 {
		e.wake(ctx, sb, "event "+sb.WakeOn)
	}
}

// deliverAllPending gives every suspended sandbox with a wake key the
// events pending for it (at start, after recovery).
func (e *Engine) deliverAllPending(ctx context.Context) {
	sbs, err := e.localSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		e.log.Warn("deliver pending events", "err", err)
		return
	}
	for _, sb := range sbs {
		if sb.State == api.StateSuspended && sb.WakeOn != "" {
			e.deliverPending(ctx, sb)
		}
	}
}

// wake resumes suspended sandbox sb in the background: on the node that
// suspended it while that node is live (its memory image is there), else
// on the node placement picks (place); another node is asked through the
// store (NotifyWake).
func (e *Engine) wake(ctx context.Context, sb *store.Sandbox, why string) {
	cl, ok := e.st.(store.Cluster)
	if !ok || e.cfg.Node == "" || sb.Node == "" {
		e.resumeAsync(sb.ID, why)
		return
	}
	to := sb.Node
	if n, err := e.node(ctx, sb.Node); err != nil || n == nil || !n.Live || n.State == api.NodeDraining {
		to, _ = e.place(ctx, sb.ImageID)
	}
	if to == "" || to == e.cfg.Node {
		e.resumeAsync(sb.ID, why)
		return
	}
	if err := cl.NotifyWake(ctx, to, sb.ID); err != nil {
		e.log.Warn("wake on another node; waking here", "sandbox", sb.Name, "node", to, "err", err)
		e.resumeAsync(sb.ID, why)
	}
}

// listenWakes wakes the sandboxes that other nodes ask this one to wake
// (wake), until the engine closes. Each time it starts listening, it also
// wakes the suspended sandboxes of this node that were delivered an event
// after they suspended: a wake sent while it did not listen is not lost.
func (e *Engine) listenWakes(cl store.Cluster) {
	defer e.bg.Done()
	cl.ListenWakes(e.ctx, e.cfg.Node, func() { e.wakeDelivered(e.ctx) }, func(id string) {
		e.resumeAsync(id, "asked by another node")
	})
}

// wakeDelivered resumes every suspended sandbox of this node that has an
// event delivered after it suspended, or that was recovered from a lost
// node and still sleeps (its resume here failed).
func (e *Engine) wakeDelivered(ctx context.Context) {
	sbs, err := e.localSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		e.log.Warn("wake sandboxes delivered an event", "err", err)
		return
	}
	for _, sb := range sbs {
		switch {
		case recovered(sb):
			if e.wakeDue(sb.ID) {
				e.wake(ctx, sb, "recovered from a lost node, not yet running")
			}
		case sb.State == api.StateSuspended && sb.WakeOn != "" && e.deliveredSince(ctx, sb) && e.wakeDue(sb.ID):
			e.wake(ctx, sb, "an event delivered to it, not yet woken")
		}
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

// EventPage selects a page of events: after the cursor of the previous
// page ("" for the first), at most Limit events (0: DefaultEventPage; at
// most MaxEventPage).
type EventPage struct {
	Cursor string
	Limit  int
}

// query turns p into a store query, checking it.
func (p EventPage) query(q store.EventQuery) (store.EventQuery, error) {
	switch {
	case p.Limit < 0 || p.Limit > MaxEventPage:
		return q, errdefs.Invalid("limit", "%d is out of range [1, %d]", p.Limit, MaxEventPage)
	case p.Limit == 0:
		p.Limit = DefaultEventPage
	}
	q.Limit, q.MaxBytes = p.Limit, EventPageBytes
	if p.Cursor != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(p.Cursor, "e"), 10, 64)
		if err != nil || n <= 0 || !strings.HasPrefix(p.Cursor, "e") {
			return q, errdefs.Invalid("cursor", "%q is not a cursor this API gave", p.Cursor)
		}
		q.After = n
	}
	return q, nil
}

// nextCursor is the cursor of the page after evs, "" when evs is the
// last page (shorter than asked and not cut by bytes).
func nextCursor(evs []*store.Event, q store.EventQuery) string {
	if len(evs) == 0 {
		return ""
	}
	var b int64
	for _, ev := range evs {
		b += int64(len(ev.Data))
	}
	if len(evs) < q.Limit && b < q.MaxBytes {
		return ""
	}
	return "e" + strconv.FormatInt(evs[len(evs)-1].Seq, 10)
}

// Events returns a page of the events delivered to a sandbox, oldest
// first, and the cursor of the next page ("" after the last).
//
// Errors: ErrSandboxNotFound; ErrInvalidArgument (limit, cursor).
func (e *Engine) Events(ctx context.Context, idOrName string, p EventPage) ([]*store.Event, string, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return nil, "", err
	}
	q, err := p.query(store.EventQuery{SandboxID: sb.ID})
	if err != nil {
		return nil, "", err
	}
	evs, err := e.st.ListEvents(ctx, q)
	if err != nil {
		return nil, "", err
	}
	return evs, nextCursor(evs, q), nil
}

// PendingEvents returns a page of the events that wait for a sandbox to
// suspend on their key (of key, or of every key when key is ""), oldest
// first, and the cursor of the next page: those ctx's caller posted (an
// admin sees all).
//
// Errors: ErrInvalidArgument (key, limit, cursor).
func (e *Engine) PendingEvents(ctx context.Context, key string, p EventPage) ([]*store.Event, string, error) {
	if key != "" {
		if err := validateWakeKey("key", key); err != nil {
			return nil, "", err
		}
	}
	q, err := p.query(store.EventQuery{Pending: true, Key: key, Owners: CallerOf(ctx).owners()})
	if err != nil {
		return nil, "", err
	}
	evs, err := e.st.ListEvents(ctx, q)
	if err != nil {
		return nil, "", err
	}
	return evs, nextCursor(evs, q), nil
}

// CancelEvent deletes a pending event that ctx's caller posted (an admin:
// any).
//
// Errors: ErrEventNotFound (no pending event has that id: delivered,
// cancelled, expired, or another tenant's).
func (e *Engine) CancelEvent(ctx context.Context, id string) error {
	return e.st.DeletePendingEvent(ctx, id, CallerOf(ctx).owners())
}

// CancelEvents deletes the pending events of key that ctx's caller posted
// (an admin: all) and returns how many there were.
//
// Errors: ErrInvalidArgument (key).
func (e *Engine) CancelEvents(ctx context.Context, key string) (int, error) {
	if err := validateWakeKey("key", key); err != nil {
		return 0, err
	}
	return e.st.DeletePendingEvents(ctx, key, CallerOf(ctx).owners())
}
