// Command sbxd is the sbx daemon: it runs gVisor sandboxes for AI agents and
// serves the REST API v1 on a Unix socket (and on TCP with an API key).
//
//	sbxd [--config FILE] [--data-dir DIR] [--socket PATH] [--listen ADDR] [--preview-domain DOMAIN]
//	     [--layers auto|btrfs|dir] [--default-disk-mb N] [--max-upload-mb N] [--max-sandboxes N] [--max-snapshots N]
//	sbxd bench-secrets [N]
//
// bench-secrets times N (default 200) HTTPS requests of each kind that
// `sbx bench secrets` prints (network.MeasureSecretProxy: the egress
// proxy's TLS termination and re-origination, in this process, on
// loopback) and writes them to stdout as JSON; it starts no daemon.
//
// API keys for --listen come from $SBX_API_KEYS (comma-separated) or
// "api_keys" in the config file; --api-key works too, but a key on the
// command line is visible to every user of the host in ps.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/internal/daemon"
	"github.com/sbxhq/sbx/internal/network"
)

// benchSecrets is `sbxd bench-secrets [N]` (see the package doc).
func benchSecrets(args []string) {
	n := 200
	if len(args) > 0 {
		v, err := strconv.Atoi(args[0])
		if err != nil || v < 1 {
			fatal(fmt.Errorf("bench-secrets: N must be a whole number ≥ 1, got %q", args[0]))
		}
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t, err := network.MeasureSecretProxy(ctx, n)
	if err != nil {
		fatal(fmt.Errorf("bench-secrets: %w", err))
	}
	if err := json.NewEncoder(os.Stdout).Encode(t); err != nil {
		fatal(err)
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bench-secrets" {
		benchSecrets(os.Args[2:])
		return
	}
	cfg := daemon.Defaults()
	fs := flag.NewFlagSet("sbxd", flag.ExitOnError)
	configFile := fs.String("config", "", "JSON config file (keys as in daemon.Config)")
	dataDir := fs.String("data-dir", "", "state directory (default "+cfg.DataDir+")")
	socket := fs.String("socket", "", "Unix socket of the API (default "+cfg.Socket+")")
	listen := fs.String("listen", "", "also serve the API on this TCP address, e.g. 127.0.0.1:7070 (needs a key: $SBX_API_KEYS, \"api_keys\" in --config, or --api-key)")
	apiKey := fs.String("api-key", "", "API key(s) for TCP, comma-separated; visible to every user in ps: prefer $SBX_API_KEYS or \"api_keys\" in --config")
	runsc := fs.String("runsc", "", "runsc binary (default: from PATH)")
	platform := fs.String("platform", "", "runsc platform: kvm or systrap (default: by probe, kvm where KVM works, else systrap; remembered in DATA_DIR/runsc/platform.json)")
	agentBin := fs.String("agent", "", "static sbx-agent binary (default: next to sbxd)")
	cacheDir := fs.String("cache-dir", "", "image build cache (default "+cfg.CacheDir+")")
	blobStore := fs.String("blob-store", "", "checkpoint storage: a directory (default <data-dir>/blobs) or s3://bucket[/prefix]?endpoint=URL&region=R")
	storeURL := fs.String("store", "", "where records live: a postgres:// URL (default: SQLite, <data-dir>/sbx.db); prefer $SBX_STORE when the URL holds a password")
	node := fs.String("node", "", "this node's name among the sbxd sharing a --store postgres:// (default: the host name)")
	advertise := fs.String("advertise", "", "URL other nodes reach this node's API at, e.g. http://10.0.0.5:7070 (default: http://LISTEN when --listen names a host)")
	netnsDir := fs.String("netns-dir", "", "where sandboxes' network namespaces are mounted (default "+cfg.NetnsDir+")")
	netCIDR := fs.String("network-cidr", "", "IPv4 network of sandbox addresses, a /30 each (default "+cfg.NetworkCIDR+")")
	netTag := fs.String("network-tag", "", "names the nftables table and starts host interface names (default "+cfg.NetworkTag+")")
	dnsUpstream := fs.String("dns-upstream", "", "DNS server for names sandboxes may resolve (default: first nameserver of /etc/resolv.conf)")
	eventRetention := fs.String("event-retention", "", "how long an event no sandbox waits on is kept (default "+cfg.EventRetention+")")
	pool := fs.String("pool", "", fmt.Sprintf("warm sandboxes kept booted (default %d)", cfg.PoolSize))
	logLevel := fs.String("log-level", "", "debug, info, warn or error")
	layers := fs.String("layers", "", "where writable layers live: auto (btrfs if possible), btrfs (subvolumes with disk quotas) or dir (no quota) (default auto)")
	defaultDisk := fs.Int("default-disk-mb", 0, "disk quota of a sandbox created without disk_mb, MiB (default 10240)")
	maxUpload := fs.Int("max-upload-mb", 0, "largest PUT files/archive body, MiB (default 1024)")
	maxSandboxes := fs.Int("max-sandboxes", 0, "most sandboxes that may exist (default 500)")
	maxSnapshots := fs.Int("max-snapshots", 0, "most memory snapshots that may exist (default 1000)")
	privateRegistries := fs.Bool("allow-private-registries", false, "let image pulls reach registries on this host's loopback or private networks")
	previewDomain := fs.String("preview-domain", "", "domain of host-based previews: http://PORT-NAME.DOMAIN[:port]/ reaches a sandbox's port (default "+cfg.PreviewDomain+")")
	_ = fs.Parse(os.Args[1:])

	if *configFile != "" {
		if err := cfg.LoadFile(*configFile); err != nil {
			fatal(err)
		}
	}
	if err := cfg.LoadEnv(os.Getenv); err != nil {
		fatal(err)
	}
	if *privateRegistries {
		cfg.AllowPrivateRegistries = true
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.DataDir, *dataDir)
	set(&cfg.Socket, *socket)
	set(&cfg.Listen, *listen)
	set(&cfg.Runsc, *runsc)
	set(&cfg.Platform, *platform)
	set(&cfg.AgentBin, *agentBin)
	set(&cfg.CacheDir, *cacheDir)
	set(&cfg.NetnsDir, *netnsDir)
	set(&cfg.BlobStore, *blobStore)
	set(&cfg.Store, *storeURL)
	set(&cfg.Node, *node)
	set(&cfg.Advertise, *advertise)
	set(&cfg.NetworkCIDR, *netCIDR)
	set(&cfg.NetworkTag, *netTag)
	set(&cfg.DNSUpstream, *dnsUpstream)
	set(&cfg.EventRetention, *eventRetention)
	set(&cfg.LogLevel, *logLevel)
	set(&cfg.PreviewDomain, *previewDomain)
	set(&cfg.Layers, *layers)
	for _, v := range []struct {
		dst *int
		v   int
	}{{&cfg.DefaultDiskMB, *defaultDisk}, {&cfg.MaxUploadMB, *maxUpload}, {&cfg.MaxSandboxes, *maxSandboxes}, {&cfg.MaxSnapshots, *maxSnapshots}} {
		if v.v != 0 {
			*v.dst = v.v
		}
	}
	if *apiKey != "" {
		cfg.APIKeys = strings.Split(*apiKey, ",")
	}
	if *pool != "" {
		n, err := strconv.Atoi(*pool)
		if err != nil {
			fatal(fmt.Errorf("--pool %q: want a number", *pool))
		}
		cfg.PoolSize = n
	}
	if err := cfg.Validate(); err != nil {
		fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Whatever runsc or a stuck call does, sbxd is gone within 10 s of a
	// SIGTERM: Run's own waits are bounded (daemon.ShutdownTimeout,
	// engine.CloseTimeout); this is the backstop. Interrupted operations
	// are journaled and finished or rolled back at the next start.
	go func() {
		<-ctx.Done()
		time.Sleep(9 * time.Second)
		fmt.Fprintln(os.Stderr, "sbxd: shutdown took more than 9 s; exiting now")
		os.Exit(1)
	}()
	if err := daemon.Run(ctx, cfg, cfg.NewLogger()); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "sbxd:", err)
	os.Exit(1)
}
