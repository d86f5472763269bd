// Package daemon is the one place that wires sbxd together: config, store,
// runtime, disk, network, engine and the API server on its listeners.
package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/blob"
	"github.com/sbxhq/sbx/internal/cluster"
	"github.com/sbxhq/sbx/internal/console"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/engine"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/runtime/gvisor"
	"github.com/sbxhq/sbx/internal/server"
	"github.com/sbxhq/sbx/internal/store"
	"github.com/sbxhq/sbx/internal/store/postgres"
	"github.com/sbxhq/sbx/internal/store/sqlite"
)

// Config is sbxd's configuration. Sources, later ones winning: defaults, a
// JSON file (--config), SBX_* environment variables, flags.
type Config struct {
	// DataDir holds the database, images, layers and sandboxes.
	DataDir string `json:"data_dir"`
	// Socket is the Unix socket of the API (no key needed; mode 0660).
	Socket string `json:"socket"`
	// Listen is a TCP address for the API ("" = none); it needs APIKeys.
	Listen string `json:"listen"`
	// APIKeys are the bearer keys accepted on Listen.
	APIKeys []string `json:"api_keys"`
	// Runsc is the runsc binary; Platform its --platform ("" = by probe:
	// kvm where KVM works, else systrap; see gvisor.ChoosePlatform).
	Runsc    string `json:"runsc"`
	Platform string `json:"platform"`
	// AgentBin is the static sbx-agent binary ("" = next to sbxd, or PATH).
	AgentBin string `json:"agent_bin"`
	// CacheDir keeps image build outputs (mmdebstrap tarballs).
	CacheDir string `json:"cache_dir"`
	// NetnsDir is where sandboxes' network namespaces are bind-mounted.
	NetnsDir string `json:"netns_dir"`
	// NetworkCIDR is the IPv4 network sandboxes' addresses come from, a /30
	// each (default 10.200.0.0/16).
	NetworkCIDR string `json:"network_cidr"`
	// NetworkTag names the nftables table ("inet <tag>") and starts the host
	// interface names ("<tag>-…"); 1–4 lowercase letters or digits, default
	// "sbx". Two sbxd on one host need different tags and CIDRs.
	NetworkTag string `json:"network_tag"`
	// DNSUpstream is the DNS server ("ip" or "ip:port") that names allowed
	// by sandboxes' rules are resolved with (default: the first nameserver
	// of /etc/resolv.conf).
	DNSUpstream string `json:"dns_upstream"`
	// BlobStore holds checkpoints' chunks: a directory ("" = DataDir/blobs)
	// or s3://bucket[/prefix]?endpoint=URL&region=R (credentials from the
	// AWS environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	BlobStore string `json:"blob_store"`
	// Store is where records live: "" (default) for the SQLite file
	// DataDir/sbx.db, or a PostgreSQL URL, postgres://user[:password]@host[:port]/db[?sslmode=…]
	// (libpq's URI; host=/run/postgresql for a Unix socket). The sbxd that
	// share one are the nodes of a cluster (Node, Advertise).
	Store string `json:"store"`
	// PoolSize is the number of warm sandboxes kept booted.
	PoolSize int `json:"pool_size"`
	// DefaultCPUs and DefaultMemoryMB are a sandbox's shape when a create
	// gives none.
	DefaultCPUs     float64 `json:"default_cpus"`
	DefaultMemoryMB int     `json:"default_memory_mb"`
	// EventRetention is how long an event that no sandbox waits on is
	// kept for one that suspends on its key later (a Go duration, default
	// "24h").
	EventRetention string `json:"event_retention"`
	// CaptureTimeout bounds one capture of a sandbox's disk (checkpoint,
	// snapshot, fork, suspend): a Go duration, default "30m".
	CaptureTimeout string `json:"capture_timeout"`
	// CaptureMaxBytes bounds the file data one capture reads (holes are
	// not read), default 64 GiB, or twice the sandbox's disk quota when
	// less.
	CaptureMaxBytes int64 `json:"capture_max_bytes"`
	// HotImageBytes bounds the memory images of stored snapshots kept on
	// this node for fast restores and forks (default
	// engine.DefaultHotImageBytes, 2 GiB; 0 keeps none once stored). Images
	// of snapshots not yet in the blob store are always kept.
	HotImageBytes *int64 `json:"hot_image_bytes"`
	// DeliveryMaxBytes bounds one delivery's archive (file data plus 1536
	// bytes an entry), checked before any work; default 1 GiB.
	DeliveryMaxBytes int64 `json:"delivery_max_bytes"`
	// EventLimits bound stored events per key, per sandbox and in all
	// (count and bytes); zero fields take engine.DefaultEventLimits.
	EventLimits engine.EventLimits `json:"event_limits"`
	// BackgroundRestore lets a resume answer while the sandbox's memory
	// still loads (runsc restore --background); default true.
	BackgroundRestore *bool `json:"background_restore"`
	// Layers is where sandboxes' writable layers live: "auto" (default:
	// btrfs when possible, else "dir"), "btrfs" (a subvolume each with a
	// disk quota; on the data dir when it is btrfs, else on a loop-mounted
	// image DataDir/layers.img) or "dir" (plain directories, no quota).
	Layers string `json:"layers"`
	// DefaultDiskMB is the disk quota of a sandbox created without disk_mb
	// (default engine.DefaultDiskMB, 10 GiB).
	DefaultDiskMB int `json:"default_disk_mb"`
	// AllowPrivateRegistries lets image pulls reach registries on the
	// host's loopback or private networks (default false).
	AllowPrivateRegistries bool `json:"allow_private_registries"`
	// MaxUploadMB bounds a PUT .../files or .../archive body, in MiB
	// (default 1024).
	MaxUploadMB int `json:"max_upload_mb"`
	// MaxSandboxes and MaxSnapshots cap how many exist (defaults 500 and
	// 1000).
	MaxSandboxes int `json:"max_sandboxes"`
	MaxSnapshots int `json:"max_snapshots"`
	// MemoryOvercommit and CPUOvercommit: the limits of the sandboxes not
	// suspended may add up to this many times the host's memory and CPUs
	// after the reserve (defaults 10 and 100).
	MemoryOvercommit float64 `json:"memory_overcommit"`
	CPUOvercommit    float64 `json:"cpu_overcommit"`
	// ReserveCPUs and ReserveMemoryMB are kept for sbxd and the host
	// (defaults 0.25 CPU and the larger of 512 MiB and 5% of memory).
	ReserveCPUs     float64 `json:"reserve_cpus"`
	ReserveMemoryMB int     `json:"reserve_memory_mb"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level"`
	// RunscDebugLogDir, when set, receives runsc's debug logs.
	RunscDebugLogDir string `json:"runsc_debug_log_dir"`
	// PreviewDomain is the domain of host-based previews: a request for
	// http://<port>-<name>.<PreviewDomain>[:port]/ goes to that sandbox's
	// port. The default, localhost, works in browsers as is (*.localhost
	// resolves to loopback); elsewhere point a wildcard DNS record at sbxd.
	// "" (in the config file) turns host-based routing off.
	PreviewDomain string `json:"preview_domain"`
	// Prices price usage (GET /v1/usage), in US dollars: per vCPU-hour
	// used, per GiB-hour allocated while running, per GB-month stored
	// (defaults api.DefaultUsagePrices: 0.025, 0.0075, 0.08).
	Prices api.UsagePrices `json:"prices"`
	// UsageInterval is how often running sandboxes' CPU counters and the
	// stored bytes are sampled (a Go duration, default "30s"); every stop,
	// suspend and delete takes a reading too.
	UsageInterval string `json:"usage_interval"`
	// Node is this sbxd's name among the nodes sharing its PostgreSQL
	// store ([a-z0-9][a-z0-9.-]{0,62}; default the host name, lowercased).
	// Ignored with the SQLite store (one node).
	Node string `json:"node"`
	// Advertise is the URL other nodes reach this node's API at
	// (http://host:port); default http://LISTEN when Listen names a host.
	Advertise string `json:"advertise"`
	// NodeLeaseTTL is how long a node's lease runs without a heartbeat (a
	// Go duration, default "15s"): a node that died counts as lost this
	// long after its last heartbeat.
	NodeLeaseTTL string `json:"node_lease_ttl"`
	// ClusterKey authenticates the nodes of a cluster to each other when
	// they forward requests: the same secret, 16 characters or more, on
	// every node (prefer $SBX_CLUSTER_KEY to the config file). Needed by
	// a node that advertises a URL.
	ClusterKey string `json:"cluster_key"`
}

// Defaults returns the built-in configuration.
func Defaults() Config {
	return Config{
		DataDir:          "/var/lib/sbx",
		Socket:           "/run/sbx/sbx.sock",
		CacheDir:         "/var/cache/sbx",
		NetnsDir:         "/run/sbx/netns",
		NetworkCIDR:      network.DefaultCIDR.String(),
		NetworkTag:       "sbx",
		PoolSize:         2,
		DefaultCPUs:      1,
		DefaultMemoryMB:  1024,
		LogLevel:         "info",
		EventRetention:   "24h",
		CaptureTimeout:   "30m",
		CaptureMaxBytes:  engine.DefaultCaptureMaxBytes,
		PreviewDomain:    "localhost",
		DeliveryMaxBytes: engine.DefaultDeliveryMaxBytes,
		Prices:           api.DefaultUsagePrices,
		UsageInterval:    engine.DefaultUsageInterval.String(),
	}
}

// LoadFile merges a JSON config file into c; unknown keys are errors.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// LoadEnv merges SBX_* environment variables into c: SBX_DATA_DIR,
// SBX_SOCKET, SBX_LISTEN, SBX_API_KEYS (comma-separated), SBX_RUNSC,
// SBX_PLATFORM, SBX_AGENT_BIN, SBX_CACHE_DIR, SBX_POOL_SIZE, SBX_LOG_LEVEL,
// SBX_BLOB_STORE, SBX_STORE, SBX_PREVIEW_DOMAIN, SBX_LAYERS, SBX_USAGE_INTERVAL,
// SBX_HOT_IMAGE_BYTES, SBX_NODE, SBX_ADVERTISE, SBX_CLUSTER_KEY,
// SBX_NODE_LEASE_TTL.
func (c *Config) LoadEnv(getenv func(string) string) error {
	str := map[string]*string{
		"SBX_DATA_DIR": &c.DataDir, "SBX_SOCKET": &c.Socket, "SBX_LISTEN": &c.Listen,
		"SBX_RUNSC": &c.Runsc, "SBX_PLATFORM": &c.Platform, "SBX_AGENT_BIN": &c.AgentBin,
		"SBX_CACHE_DIR": &c.CacheDir, "SBX_LOG_LEVEL": &c.LogLevel, "SBX_BLOB_STORE": &c.BlobStore, "SBX_STORE": &c.Store,
		"SBX_NETWORK_CIDR": &c.NetworkCIDR, "SBX_NETWORK_TAG": &c.NetworkTag, "SBX_DNS_UPSTREAM": &c.DNSUpstream,
		"SBX_PREVIEW_DOMAIN": &c.PreviewDomain, "SBX_EVENT_RETENTION": &c.EventRetention,
		"SBX_CAPTURE_TIMEOUT": &c.CaptureTimeout,
		"SBX_LAYERS":          &c.Layers,
		"SBX_USAGE_INTERVAL":  &c.UsageInterval,
		"SBX_NODE":            &c.Node,
		"SBX_ADVERTISE":       &c.Advertise,
		"SBX_CLUSTER_KEY":     &c.ClusterKey,
		"SBX_NODE_LEASE_TTL":  &c.NodeLeaseTTL,
	}
	for k, p := range str {
		if v := getenv(k); v != "" {
			*p = v
		}
	}
	if v := getenv("SBX_API_KEYS"); v != "" {
		c.APIKeys = strings.Split(v, ",")
	}
	if v := getenv("SBX_POOL_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("SBX_POOL_SIZE=%q: %w", v, err)
		}
		c.PoolSize = n
	}
	if v := getenv("SBX_HOT_IMAGE_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("SBX_HOT_IMAGE_BYTES=%q: %w", v, err)
		}
		c.HotImageBytes = &n
	}
	return nil
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if !filepath.IsAbs(c.DataDir) {
		errs = append(errs, fmt.Errorf("data dir %q must be an absolute path", c.DataDir))
	}
	if c.Socket == "" && c.Listen == "" {
		errs = append(errs, errors.New("no listener: give a socket or a listen address"))
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("listen %q: %w", c.Listen, err))
		}
		if len(c.APIKeys) == 0 {
			errs = append(errs, errors.New("listen needs at least one API key ($SBX_API_KEYS, \"api_keys\" in the config file, or --api-key): TCP always requires a key"))
		}
	}
	for i, k := range c.APIKeys {
		if len(k) < 16 {
			errs = append(errs, fmt.Errorf("API key %d is shorter than 16 characters", i+1))
		}
	}
	if _, err := netip.ParsePrefix(c.NetworkCIDR); err != nil {
		errs = append(errs, fmt.Errorf("network cidr %q: %w", c.NetworkCIDR, err))
	}
	if d, err := time.ParseDuration(c.EventRetention); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("event retention %q: want a positive duration such as 24h", c.EventRetention))
	}
	if d, err := time.ParseDuration(c.CaptureTimeout); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("capture timeout %q: want a positive duration such as 30m", c.CaptureTimeout))
	}
	if d, err := time.ParseDuration(c.UsageInterval); err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("usage interval %q: want a positive duration such as 30s", c.UsageInterval))
	}
	if c.Prices.CPUHour < 0 || c.Prices.MemoryGiBHour < 0 || c.Prices.StorageGBMonth < 0 {
		errs = append(errs, fmt.Errorf("prices %+v: must not be negative", c.Prices))
	}
	if c.HotImageBytes != nil && *c.HotImageBytes < 0 {
		errs = append(errs, fmt.Errorf("hot image bytes %d: want 0 or more bytes", *c.HotImageBytes))
	}
	if c.CaptureMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("capture max bytes %d: want a positive number of bytes", c.CaptureMaxBytes))
	}
	if c.DeliveryMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("delivery max bytes %d: want a positive number of bytes", c.DeliveryMaxBytes))
	}
	if c.PoolSize < 0 || c.PoolSize > 64 {
		errs = append(errs, fmt.Errorf("pool size %d is out of range [0, 64]", c.PoolSize))
	}
	if c.DefaultCPUs <= 0 {
		errs = append(errs, fmt.Errorf("default cpus %g must be positive", c.DefaultCPUs))
	}
	if c.DefaultMemoryMB < 64 {
		errs = append(errs, fmt.Errorf("default memory %d MB must be at least 64", c.DefaultMemoryMB))
	}
	switch c.Layers {
	case "", disk.LayersAuto, disk.LayersBtrfs, disk.LayersDir:
	default:
		errs = append(errs, fmt.Errorf("layers %q: want auto, btrfs or dir", c.Layers))
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"default disk MB", c.DefaultDiskMB}, {"max upload MB", c.MaxUploadMB}, {"max sandboxes", c.MaxSandboxes},
		{"max snapshots", c.MaxSnapshots}, {"reserve memory MB", c.ReserveMemoryMB}} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("%s %d must not be negative", v.name, v.n))
		}
	}
	if c.DefaultDiskMB != 0 && c.DefaultDiskMB < engine.MinDiskMB {
		errs = append(errs, fmt.Errorf("default disk MB %d must be at least %d", c.DefaultDiskMB, engine.MinDiskMB))
	}
	if c.MemoryOvercommit < 0 || c.CPUOvercommit < 0 || c.ReserveCPUs < 0 {
		errs = append(errs, errors.New("overcommit and reserve values must not be negative"))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.PreviewDomain != "" && !validDomain(c.PreviewDomain) {
		errs = append(errs, fmt.Errorf("preview domain %q: want a DNS name such as localhost or preview.example.org (no scheme, port or wildcard)", c.PreviewDomain))
	}
	if strings.HasPrefix(c.BlobStore, "s3:") {
		if _, err := blob.ParseS3URL(c.BlobStore); err != nil {
			errs = append(errs, err)
		}
	} else if c.BlobStore != "" && !filepath.IsAbs(c.BlobStore) {
		errs = append(errs, fmt.Errorf("blob store %q: want an absolute directory or s3://bucket", c.BlobStore))
	}
	if c.Store != "" && !postgres.IsURL(c.Store) {
		errs = append(errs, errors.New("store: want a postgres:// URL (or nothing, for SQLite in the data dir)"))
	}
	if c.Node != "" {
		if err := cluster.ValidName(c.Node); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Advertise != "" {
		if u, err := url.Parse(c.Advertise); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			errs = append(errs, fmt.Errorf("advertise %q: want http://host:port or https://host:port", c.Advertise))
		}
	}
	if c.Store != "" && advertiseURL(*c) != "" && len(c.ClusterKey) < 16 {
		errs = append(errs, errors.New("a node that advertises a URL needs a cluster key of 16 characters or more, the same on every node ($SBX_CLUSTER_KEY or \"cluster_key\" in the config file)"))
	}
	if c.NodeLeaseTTL != "" {
		if d, err := time.ParseDuration(c.NodeLeaseTTL); err != nil || d < time.Second {
			errs = append(errs, fmt.Errorf("node lease ttl %q: want a duration of 1s or more, such as 15s", c.NodeLeaseTTL))
		}
	}
	return errors.Join(errs...)
}

// validDomain reports whether d is a DNS name: dot-separated labels of
// letters, digits and inner hyphens, 1-63 bytes each.
func validDomain(d string) bool {
	if len(d) > 253 {
		return false
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger returns sbxd's logger at c's level, writing text to stderr.
func (c *Config) NewLogger() *slog.Logger {
	l, _ := parseLevel(c.LogLevel)
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// openBlobs opens the configured blob store.
func openBlobs(ctx context.Context, cfg Config) (blob.Store, error) {
	if strings.HasPrefix(cfg.BlobStore, "s3:") {
		s3cfg, err := blob.ParseS3URL(cfg.BlobStore)
		if err != nil {
			return nil, err
		}
		return blob.OpenS3(ctx, s3cfg)
	}
	dir := cfg.BlobStore
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "blobs")
	}
	return blob.OpenLocal(dir)
}

// ParseFaults parses SBX_FAULTS ("point=duration,..."), which pauses
// named points of operations so that crash tests can kill sbxd there.
func ParseFaults(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil {
			return nil, fmt.Errorf("SBX_FAULTS %q: want point=duration", kv)
		}
		out[k] = d
	}
	return out, nil
}

// findAgent locates sbx-agent: the configured path, next to sbxd, or PATH.
func findAgent(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "sbx-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "sbx-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("sbx-agent not found next to sbxd or in PATH (go install ./cmd/... with CGO_ENABLED=0)")
}

// openStore opens the record store cfg names: the SQLite file in the data
// dir, or a PostgreSQL database that sbxd nodes share (joinCluster). It
// returns the store and its name for logs (a URL's password left out).
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, string, error) {
	if cfg.Store == "" {
		path := filepath.Join(cfg.DataDir, "sbx.db")
		st, err := sqlite.Open(ctx, path)
		return st, "sqlite " + path, err
	}
	st, err := postgres.Open(ctx, cfg.Store)
	if err != nil {
		return nil, "", err
	}
	st.SetLogger(log)
	return st, "postgres " + st.Name(), nil
}

// cgroupParent is the cgroup under which this sbxd's sandboxes get theirs:
// /sbx for the default network tag, /sbx-TAG for another. The tag is this
// sbxd's alone on the host (network.NewManager holds it), so two sbxd on
// one host never touch each other's cgroups, even for one sandbox id: in a
// cluster, a sandbox that moved between two nodes on one host keeps its id,
// and the cleanup of its old node's leftovers must not kill it.
func cgroupParent(tag string) string {
	if tag == "" || tag == "sbx" {
		return "/sbx"
	}
	return "/sbx-" + tag
}

// joinCluster joins the nodes table when the store is shared
// (store.Cluster: PostgreSQL) and returns the membership; nil with the
// SQLite store. Errors: no usable node name; the name held by another
// live sbxd, or a live node of another cluster protocol
// (errdefs.ErrConflict); the store's.
func joinCluster(ctx context.Context, cfg Config, st store.Store, capacity func(context.Context) api.NodeCapacity, renewed func(context.Context), log *slog.Logger) (*cluster.Member, error) {
	cl, ok := st.(store.Cluster)
	if !ok {
		return nil, nil
	}
	name := cfg.Node
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node name: %w (give --node)", err)
		}
		name = strings.ToLower(h)
		if cluster.ValidName(name) != nil {
			return nil, fmt.Errorf("the host name %q is not a node name ([a-z0-9][a-z0-9.-]{0,62}): give --node", h)
		}
	}
	ttl, _ := time.ParseDuration(cfg.NodeLeaseTTL)
	return cluster.Join(ctx, cl, cluster.Config{Name: name, URL: advertiseURL(cfg), DataDir: cfg.DataDir,
		Version: server.Version, LeaseTTL: ttl, Capacity: capacity, Renewed: renewed, Key: cfg.ClusterKey}, log)
}

// advertiseURL is the URL other nodes reach this one at: Advertise, or
// http://LISTEN when Listen names a host (not 0.0.0.0 or ::), else "".
func advertiseURL(cfg Config) string {
	if cfg.Advertise != "" {
		return strings.TrimSuffix(cfg.Advertise, "/")
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil || host == "" {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return ""
	}
	return "http://" + cfg.Listen
}

// lockDataDir takes an exclusive flock on DIR/sbxd.lock, so that two sbxd
// never manage the same sandboxes, and writes this process's pid into it
// ("1234\n"): whoever holds the lock is the data dir's sbxd, however it
// was started (scripts/install.sh stops it by that pid). Errors: another
// live process holds it after 10 s (the error gives its pid).
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "sbxd.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	// A previous sbxd that was just killed may take a moment to exit.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.Close()
			holder := ""
			if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
				holder = fmt.Sprintf(" (pid %s)", bytes.TrimSpace(b))
			}
			return nil, fmt.Errorf("data dir %s is in use by another sbxd%s", dir, holder)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// ShutdownTimeout bounds how long Run waits, once ctx is cancelled, for
// API calls in flight to answer; the engine's own wait is bounded by
// engine.CloseTimeout, so Run returns within about 7 s of a SIGTERM.
const ShutdownTimeout = 3 * time.Second

// Run runs sbxd until ctx is cancelled. Sandboxes keep running after it
// returns; the next Run reattaches them.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// 0700 also for a data dir made earlier: images (with their setuid
	// files), layers and the database are root's alone.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return err
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	agentBin, err := findAgent(cfg.AgentBin)
	if err != nil {
		return err
	}
	st, storeName, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	// eng is set below; the heartbeat reads its capacity once it is.
	var eng *engine.Engine
	member, err := joinCluster(ctx, cfg, st, func(ctx context.Context) api.NodeCapacity {
		if eng == nil {
			return api.NodeCapacity{}
		}
		return eng.NodeCapacity(ctx)
	}, func(ctx context.Context) {
		if eng != nil {
			eng.FenceCheck(ctx)
		}
	}, log)
	if err != nil {
		return err
	}
	nodeName, nodeURL := "", ""
	if member != nil {
		nodeName, nodeURL = member.Name(), advertiseURL(cfg)
		// A clean stop leaves the cluster: the node shows stopped, not lost.
		defer func() {
			if err := member.Leave(); err != nil {
				log.Warn("leave the cluster", "err", err)
			}
		}()
	}
	rt, err := gvisor.New(gvisor.Config{
		Runsc: cfg.Runsc, Root: filepath.Join(cfg.DataDir, "runsc"), Platform: cfg.Platform,
		DebugLogDir: cfg.RunscDebugLogDir, CgroupParent: cgroupParent(cfg.NetworkTag),
	})
	if err != nil {
		return err
	}
	log.Info("runsc platform", "platform", rt.Choice().Platform, "reason", rt.Choice().Reason)
	if n := rt.Strays(); n > 0 {
		log.Warn("killed runsc commands that the last sbxd left running when it stopped", "count", n)
	}
	images, err := disk.NewImages(filepath.Join(cfg.DataDir, "images"), cfg.CacheDir, st, log)
	if err != nil {
		return err
	}
	images.AllowPrivateRegistries = cfg.AllowPrivateRegistries
	cidr, _ := netip.ParsePrefix(cfg.NetworkCIDR)
	netm, err := network.NewManager(network.Config{
		NetnsDir: cfg.NetnsDir, CIDR: cidr, Tag: cfg.NetworkTag, Upstream: cfg.DNSUpstream, Log: log,
		Holder: "data dir " + cfg.DataDir + ", socket " + cfg.Socket,
	})
	if err != nil {
		return err
	}
	defer netm.Close()
	blobs, err := openBlobs(ctx, cfg)
	if err != nil {
		return err
	}
	retention, _ := time.ParseDuration(cfg.EventRetention)
	captureTimeout, _ := time.ParseDuration(cfg.CaptureTimeout)
	usageInterval, _ := time.ParseDuration(cfg.UsageInterval)
	faults, err := ParseFaults(os.Getenv("SBX_FAULTS"))
	if err != nil {
		return err
	}
	eng, err = engine.New(engine.Config{
		DataDir: cfg.DataDir, AgentBin: agentBin, PoolSize: cfg.PoolSize,
		DefaultCPUs: cfg.DefaultCPUs, DefaultMemoryMB: cfg.DefaultMemoryMB, Faults: faults,
		EventRetention: retention, EventLimits: cfg.EventLimits, BackgroundRestore: cfg.BackgroundRestore == nil || *cfg.BackgroundRestore,
		Layers: cfg.Layers, DefaultDiskMB: cfg.DefaultDiskMB, MaxSandboxes: cfg.MaxSandboxes, MaxSnapshots: cfg.MaxSnapshots,
		MemoryOvercommit: cfg.MemoryOvercommit, CPUOvercommit: cfg.CPUOvercommit,
		ReserveCPUs: cfg.ReserveCPUs, ReserveMemoryMB: cfg.ReserveMemoryMB,
		CaptureTimeout: captureTimeout, CaptureMaxBytes: cfg.CaptureMaxBytes, HotImageBytes: hotImageBytes(cfg.HotImageBytes),
		DeliveryMaxBytes: cfg.DeliveryMaxBytes,
		Prices:           cfg.Prices, UsageInterval: usageInterval,
		Node: nodeName, NodeURL: nodeURL, Version: server.Version, SharedBlobs: cfg.BlobStore != "", ClusterKey: cfg.ClusterKey,
	}, st, rt, images, netm, blobs, log)
	if err != nil {
		return err
	}
	defer eng.Close()
	if err := eng.Start(ctx); err != nil {
		return err
	}
	choice := rt.Choice()
	srv := server.New(eng, server.Config{Node: nodeName, ClusterKey: cfg.ClusterKey, APIKeys: cfg.APIKeys, PreviewDomain: cfg.PreviewDomain,
		MaxUploadBytes: int64(cfg.MaxUploadMB) << 20, Platform: choice.Platform, PlatformReason: choice.Reason,
		Console: console.Handler(console.Config{PreviewDomain: cfg.PreviewDomain})}, log)

	var servers []*http.Server
	errc := make(chan error, 2)
	serve := func(ln net.Listener, auth bool) {
		hs := &http.Server{Handler: srv.Handler(auth), ReadHeaderTimeout: 30 * time.Second}
		servers = append(servers, hs)
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if cfg.Socket != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
			return err
		}
		_ = os.Remove(cfg.Socket)
		ln, err := net.Listen("unix", cfg.Socket)
		if err != nil {
			return err
		}
		if err := os.Chmod(cfg.Socket, 0o660); err != nil {
			ln.Close()
			return err
		}
		serve(ln, false)
		log.Info("listening", "socket", cfg.Socket)
	}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return err
		}
		serve(ln, true)
		log.Info("listening", "addr", ln.Addr().String())
	}
	fenced := make(<-chan struct{})
	if member != nil {
		// The join published no capacity (the engine did not exist yet).
		if err := member.Heartbeat(ctx); err != nil {
			return err
		}
		go member.Run(ctx)
		fenced = member.Fenced()
		log.Info("joined the cluster", "node", member.Name(), "epoch", member.Epoch(), "advertise", nodeURL)
	}
	kind, _, _, _ := eng.DiskLayers()
	log.Info("sbxd ready", "runtime", eng.Runtime(), "layers", kind, "data_dir", cfg.DataDir, "pool", cfg.PoolSize, "blob_store", blobs.Name(), "store", storeName)
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-fenced:
		// Another sbxd took this node's name over: it acts for the node now.
		err = fmt.Errorf("node %s was taken over by another sbxd (a higher epoch): this one stops", member.Name())
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	for _, hs := range servers {
		_ = hs.Shutdown(sctx)
	}
	log.Info("sbxd stopped; sandboxes keep running")
	return err
}

// hotImageBytes is engine.Config.HotImageBytes for the config's
// hot_image_bytes: unset is the engine's default, 0 none (-1 to the
// engine).
func hotImageBytes(b *int64) int64 {
	switch {
	case b == nil:
		return 0
	case *b == 0:
		return -1
	}
	return *b
}
