// Package engine is the one place for sandbox lifecycle rules: it owns the
// state machine (creating → running ⇄ paused → stopped → suspended →
// deleting), serialises lifecycle operations per sandbox, and wires the
// runtime, disk, network and store layers together. It knows nothing of
// HTTP.
package engine

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/gc"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/secret"
	"github.com/sbxhq/sbx/internal/store"
)

// Config holds the engine's settings.
type Config struct {
	// DataDir holds layers/, sandboxes/, volumes/ and bin/.
	DataDir string
	// AgentBin is the host path of the static sbx-agent binary; it is
	// copied to DataDir/bin and bind-mounted read-only at /.sbx/bin.
	AgentBin string
	// PoolSize is how many warm sandboxes of the default image and shape
	// are kept booted ahead of creates; 0 disables the pool.
	PoolSize int
	// DefaultCPUs and DefaultMemoryMB are the shape of a sandbox created
	// without cpus or memory_mb.
	DefaultCPUs     float64
	DefaultMemoryMB int
	// MaxCPUs and MaxMemoryMB bound what a create may ask for.
	MaxCPUs     float64
	MaxMemoryMB int
	// BootTimeout bounds a boot, from runsc run to the agent's first answer.
	BootTimeout time.Duration
	// BackgroundRestore makes a resume return while memory pages still load
	// (runsc restore --background).
	BackgroundRestore bool
	// EventRetention is how long an event no sandbox waits for is kept
	// (default DefaultEventRetention).
	EventRetention time.Duration
	// CaptureTimeout bounds the time of one capture of a sandbox's disk
	// (default DefaultCaptureTimeout); CaptureMaxBytes the file data it
	// reads (default DefaultCaptureMaxBytes, or twice the sandbox's disk
	// quota when less). Passing either is ErrCaptureLimit.
	CaptureTimeout  time.Duration
	CaptureMaxBytes int64
	// EventLimits bound the events sbxd stores; zero fields take
	// DefaultEventLimits.
	EventLimits EventLimits
	// Layers is where writable layers live: disk.LayersAuto (default),
	// disk.LayersBtrfs or disk.LayersDir.
	Layers string
	// DefaultDiskMB is the disk quota of a sandbox created without
	// disk_mb, on btrfs layers (default DefaultDiskMB).
	DefaultDiskMB int
	// MaxSandboxes and MaxSnapshots cap how many exist (defaults
	// DefaultMaxSandboxes, DefaultMaxSnapshots).
	MaxSandboxes, MaxSnapshots int
	// MemoryOvercommit and CPUOvercommit: the sandboxes not suspended may
	// have limits adding up to this many times what the host has after
	// its reserve (defaults DefaultMemoryOvercommit, DefaultCPUOvercommit).
	MemoryOvercommit, CPUOvercommit float64
	// ReserveCPUs and ReserveMemoryMB/ReserveMemoryPercent are kept for
	// sbxd and the host (defaults DefaultReserveCPUs, the larger of
	// DefaultReserveMemoryMB and DefaultReserveMemoryPercent % of memory).
	ReserveCPUs          float64
	ReserveMemoryMB      int
	ReserveMemoryPercent int
	// DeliveryMaxBytes bounds a delivery's archive: file data plus 1536
	// bytes an entry (default DefaultDeliveryMaxBytes).
	DeliveryMaxBytes int64
	// Prices price usage (GET /v1/usage); zero fields take
	// api.DefaultUsagePrices'.
	Prices api.UsagePrices
	// UsageInterval is how often the meter samples running sandboxes and
	// stored bytes (default DefaultUsageInterval).
	UsageInterval time.Duration
	// HotImageBytes bounds the hot images of stored snapshots kept on this
	// node for fast restores (default DefaultHotImageBytes; negative: none
	// once stored). See hot.go.
	HotImageBytes int64
	// Faults pause named points of operations (SBX_FAULTS, for crash
	// tests); empty in production.
	Faults map[string]time.Duration
	// Node is this sbxd's node name in a cluster (its sandboxes' Node),
	// "" on a single sbxd; NodeURL the URL it advertises; Version the sbx
	// version it runs.
	Node, NodeURL, Version string
	// SharedBlobs says that the blob store may be shared with other nodes
	// (an S3 bucket or a directory given by the operator, not the data
	// dir's own): a cluster's nodes then do not collect blobs (gc.go).
	SharedBlobs bool
	// ClusterKey is the cluster's key ($SBX_CLUSTER_KEY; "" none): a
	// cluster's node seals new secrets with a key derived from it
	// (secret.DeriveKeeper), so that any node of the cluster opens them
	// and a sandbox with secrets can move.
	ClusterKey string
}

// Engine runs sandboxes.
type Engine struct {
	cfg Config
	// started is when New made the engine.
	started time.Time
	// nodes caches the cluster's node records for Route.
	nodes nodeCache
	// recoveryClock times recovery snapshots (recovery.go).
	recoveryClock recoveryClock
	// peers reaches the other nodes (SetPeers); nil on a single sbxd.
	peers Peers
	// capCache is this node's capacity for placement (nodes.go).
	capCache capacityCache
	// hotStores makes concurrent stores of one snapshot's hot image one
	// (hot.go).
	hotStores singleflight.Group
	// pub remembers the images published to the blob store (imagedist.go).
	pub published
	// publishKick asks publishLoop to publish soon.
	publishKick chan struct{}
	st          store.Store
	rt          runtime.Runtime
	images      *disk.Images
	layers      *disk.Layers
	blobs       blob.Store
	net         Network
	log         *slog.Logger
	// mountRunDir makes a sandbox's /.sbx/run dir: disk.MountRunDir, a
	// tmpfs. Only the engine's unit tests change it (a plain directory,
	// without root).
	mountRunDir func(dir string) error

	sandboxesDir string
	volumesDir   string
	agentDir     string

	// instMu guards insts, the in-memory instance of each sandbox (by id).
	instMu sync.Mutex
	insts  map[string]*instance

	pool *pool

	// leases pin the blobs of operations in progress against the
	// collector, without either waiting for the other.
	leases *blob.Leases
	// collector deletes the blobs that nothing records or pins.
	collector *gc.Collector
	// keeper seals and opens secrets' values (internal/engine/secrets.go)
	// with this node's key; clusterKeeper with the key derived from the
	// cluster key (nil when sbxd has none), which a cluster's node seals
	// new secrets with.
	keeper, clusterKeeper *secret.Keeper
	// deliveryKey signs delivery records; deliverMu makes signing a
	// record and appending it to the chain one step.
	deliveryKey ed25519.PrivateKey
	deliverMu   sync.Mutex
	// eventsMu makes an event's cap checks and its insert one step.
	eventsMu sync.Mutex
	// host and capacity are the host's resources and what sandboxes may
	// have of them; adm holds admitted demands not yet recorded.
	host     runtime.Host
	capacity capacity
	adm      admission

	// meter meters usage; rt is wrapped so that it sees every
	// container's start and delete.
	meter *meter
	// ingest stores snapshot checkpoints in the blob store (cow.go).
	ingest *ingester
	// hot counts the users of snapshots' hot memory images (hot.go).
	hot *hotImages

	bg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns an engine. netm makes the sandboxes' networks (sbxd passes
// its *network.Manager). Call Start before serving requests and Close when
// StoreOutage is the record store's outage (store.Health): an
// errdefs.ErrUnavailable error while its database does not answer, nil
// while it does and for a store that cannot have one (SQLite).
func (e *Engine) StoreOutage() error {
	if h, ok := e.st.(store.Health); ok {
		return h.Outage()
	}
	return nil
}

// done.
func New(cfg Config, st store.Store, rt runtime.Runtime, images *disk.Images, netm Network, blobs blob.Store, log *slog.Logger) (*Engine, error) {
	if cfg.DefaultCPUs == 0 {
		cfg.DefaultCPUs = 1
	}
	if cfg.DefaultMemoryMB == 0 {
		cfg.DefaultMemoryMB = 1024
	}
	if cfg.MaxCPUs == 0 {
		cfg.MaxCPUs = 64
	}
	if cfg.MaxMemoryMB == 0 {
		cfg.MaxMemoryMB = 64 << 10
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	if cfg.CaptureTimeout <= 0 {
		cfg.CaptureTimeout = DefaultCaptureTimeout
	}
	if cfg.CaptureMaxBytes <= 0 {
		cfg.CaptureMaxBytes = DefaultCaptureMaxBytes
	}
	if cfg.DefaultDiskMB == 0 {
		cfg.DefaultDiskMB = DefaultDiskMB
	}
	if cfg.MaxSandboxes == 0 {
		cfg.MaxSandboxes = DefaultMaxSandboxes
	}
	if cfg.MaxSnapshots == 0 {
		cfg.MaxSnapshots = DefaultMaxSnapshots
	}
	if cfg.MemoryOvercommit == 0 {
		cfg.MemoryOvercommit = DefaultMemoryOvercommit
	}
	if cfg.CPUOvercommit == 0 {
		cfg.CPUOvercommit = DefaultCPUOvercommit
	}
	if cfg.ReserveCPUs == 0 {
		cfg.ReserveCPUs = DefaultReserveCPUs
	}
	if cfg.ReserveMemoryMB == 0 {
		cfg.ReserveMemoryMB = DefaultReserveMemoryMB
	}
	if cfg.ReserveMemoryPercent == 0 {
		cfg.ReserveMemoryPercent = DefaultReserveMemoryPercent
	}
	if cfg.Prices.CPUHour == 0 {
		cfg.Prices.CPUHour = api.DefaultUsagePrices.CPUHour
	}
	if cfg.Prices.MemoryGiBHour == 0 {
		cfg.Prices.MemoryGiBHour = api.DefaultUsagePrices.MemoryGiBHour
	}
	if cfg.Prices.StorageGBMonth == 0 {
		cfg.Prices.StorageGBMonth = api.DefaultUsagePrices.StorageGBMonth
	}
	if cfg.UsageInterval <= 0 {
		cfg.UsageInterval = DefaultUsageInterval
	}
	host, err := runtime.HostCapacity()
	if err != nil {
		return nil, err
	}
	layers, err := disk.OpenLayers(disk.LayersConfig{DataDir: cfg.DataDir, Mode: cfg.Layers})
	if err != nil {
		return nil, fmt.Errorf("layers: %w", err)
	}
	if fb := layers.Fallback(); fb != "" {
		log.Warn("writable layers on plain directories, without disk quotas: btrfs is not available", "reason", fb)
	}
	e := &Engine{
		cfg: cfg, st: st, rt: rt, images: images, net: netm, blobs: blobs, log: log,
		started:      time.Now(),
		publishKick:  make(chan struct{}, 1),
		layers:       layers,
		mountRunDir:  disk.MountRunDir,
		host:         host,
		capacity:     hostCapacity(host, cfg),
		sandboxesDir: filepath.Join(cfg.DataDir, "sandboxes"),
		volumesDir:   filepath.Join(cfg.DataDir, "volumes"),
		agentDir:     filepath.Join(cfg.DataDir, "bin"),
		insts:        map[string]*instance{},
		leases:       blob.NewLeases(),
		ingest:       newIngester(),
		hot:          newHotImages(),
	}
	e.meter = newMeter(e, rt, cfg.UsageInterval)
	e.rt = &meteredRuntime{Runtime: rt, m: e.meter}
	// The agent's socket path on the host must fit in sun_path (108 bytes).
	if n := len(e.socketPath("sbx_0123456789abcdef")); n >= 108 {
		return nil, fmt.Errorf("data dir %s is too long: agent socket paths would be %d bytes, more than a Unix socket allows", cfg.DataDir, n)
	}
	for _, d := range []string{e.sandboxesDir, e.volumesDir, e.agentDir, filepath.Join(cfg.DataDir, "layers"), e.snapshotsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(e.resolvConf()), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.resolvConf(), []byte(netm.ResolvConf()), 0o644); err != nil {
		return nil, err
	}
	if err := e.installAgent(); err != nil {
		return nil, err
	}
	if err := e.initDeliveries(); err != nil {
		return nil, err
	}
	if cfg.Node != "" && cfg.ClusterKey != "" {
		if e.clusterKeeper, err = secret.DeriveKeeper([]byte(cfg.ClusterKey)); err != nil {
			return nil, err
		}
	}
	if e.keeper, err = secret.OpenKeeper(filepath.Join(cfg.DataDir, secret.KeyFile)); err != nil {
		return nil, err
	}
	e.collector = e.newCollector()
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.pool = newPool(e, cfg.PoolSize)
	images.OnChange = func(name string) {
		if name == disk.DefaultImage {
			e.pool.refill()
		}
		e.kickPublish()
	}
	return e, nil
}

// Start reconciles records with what runsc reports (reattaching running
// sandboxes, finishing or rolling back interrupted operations, removing
// orphans) and starts background work: the warm pool and the monitors.
func (e *Engine) Start(ctx context.Context) error {
	if err := e.meter.load(ctx); err != nil {
		return err
	}
	if err := e.recoverOps(ctx); err != nil {
		return fmt.Errorf("recover interrupted operations: %w", err)
	}
	if err := e.reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if err := e.recoverCheckpoints(ctx); err != nil {
		return fmt.Errorf("recover checkpoints: %w", err)
	}
	if err := e.recoverHot(ctx); err != nil {
		return fmt.Errorf("recover snapshots' memory images: %w", err)
	}
	e.recoverGuards(ctx)
	// A suspend that a crash interrupted and recovery completed has its
	// wake key only now: events posted to it meanwhile wait as pending.
	e.deliverAllPending(ctx)
	e.limitAll()
	e.pool.start()
	e.bg.Add(5)
	go e.gcLoop()
	go e.idleLoop()
	go e.meter.loop()
	go e.meter.limitsLoop()
	go e.ingestLoop()
	if cl, ok := e.st.(store.Cluster); ok && e.cfg.Node != "" {
		e.bg.Add(3)
		go e.listenWakes(cl)
		go e.wakeLoop(cl)
		go e.drainLoop(cl)
	}
	if _, ok := e.distributesImages(); ok {
		e.bg.Add(2)
		go e.publishLoop()
		go e.recoveryLoop()
	}
	e.kickGC()
	return nil
}

// CloseTimeout bounds how long Close waits for background work (a boot
// of the warm pool, a GC round) to notice its cancellation.
const CloseTimeout = 4 * time.Second

// Close stops background work, waiting at most CloseTimeout: work still
// running then is abandoned, which is safe because every operation is
// journaled and recovered by the next Start. Sandboxes keep running; a
// later Start reattaches them.
func (e *Engine) Close() {
	e.cancel()
	done := make(chan struct{})
	go func() { e.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(CloseTimeout):
		e.log.Warn("background work did not stop in time; leaving it to the journal", "waited", CloseTimeout)
	}
}

// Runtime is the name of the runtime in use.
func (e *Engine) Runtime() string { return e.rt.Name() }

// WarmSandboxes is the number of booted sandboxes waiting in the pool.
func (e *Engine) WarmSandboxes() int { return e.pool.count() }

// Images is the engine's image manager.
func (e *Engine) Images() *disk.Images { return e.images }

// installAgent copies the agent binary into DataDir/bin (atomically, only
// when it changed), after checking that it is statically linked.
func (e *Engine) installAgent() error {
	if e.cfg.AgentBin == "" {
		return fmt.Errorf("no sbx-agent binary configured")
	}
	src, err := os.ReadFile(e.cfg.AgentBin)
	if err != nil {
		return fmt.Errorf("read sbx-agent: %w", err)
	}
	if err := checkStatic(src); err != nil {
		return fmt.Errorf("%s: %w", e.cfg.AgentBin, err)
	}
	dst := filepath.Join(e.agentDir, "sbx-agent")
	if cur, err := os.ReadFile(dst); err == nil && string(cur) == string(src) {
		return nil
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, src, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// newID returns a sandbox id: "sbx_" and 16 hex digits. The underscore
// keeps ids out of the name space, so {name} paths are unambiguous.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sbx_" + hex.EncodeToString(b[:])
}

func (e *Engine) sandboxDir(id string) string { return filepath.Join(e.sandboxesDir, id) }

// resolvConf is the /etc/resolv.conf of every sandbox (sbxd's DNS server).
func (e *Engine) resolvConf() string          { return filepath.Join(e.cfg.DataDir, "etc", "resolv.conf") }
func (e *Engine) bundleDir(id string) string  { return filepath.Join(e.sandboxDir(id), "bundle") }
func (e *Engine) runDir(id string) string     { return filepath.Join(e.sandboxDir(id), "run") }
func (e *Engine) socketPath(id string) string { return filepath.Join(e.runDir(id), "agent.sock") }

// stateForbids is the error for a request that the sandbox's state does not
// allow.
func stateForbids(sb *store.Sandbox, what string) error {
	if sb.State == api.StateSuspended {
		return errdefs.Conflictf("sandbox %q is suspended: cannot %s; resume it first (POST .../resume, sbx resume)", sb.Name, what)
	}
	return errdefs.Conflictf("sandbox %q is %s: cannot %s", sb.Name, sb.State, what)
}

var storeAll = store.SandboxFilter{All: true}
