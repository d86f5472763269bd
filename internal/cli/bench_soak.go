package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// soakOptions are the flags of sbx bench soak.
type soakOptions struct {
	agents       int
	duration     time.Duration
	killEvery    time.Duration
	deadline     time.Duration
	seed         uint64
	sbxd         string
	sbxdArgs     []string
	runsc        string
	dataDir      string
	cacheDir     string
	netTag       string
	netCIDR      string
	dnsUpstream  string
	pool         int
	image        string
	maxSandboxes int
	keep         bool
}

func (a *app) benchSoakCmd() *cobra.Command {
	var o soakOptions
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run agents against an sbxd that is killed at random moments and check that nothing is lost",
		Long: "Starts its own sbxd (own data dir, socket, netns dir, network tag and CIDR, so it cannot\n" +
			"meet another sbxd on the host) and runs --agents simulated agents on it for --duration: each\n" +
			"creates, execs (writing marker files of known content), checkpoints, restores, snapshots,\n" +
			"forks, suspends, resumes and deletes its own sandboxes at random. About every --kill-every\n" +
			"(jittered ±50%) sbxd is killed with SIGKILL in the middle of whatever runs, and started\n" +
			"again; then, with the agents held, the invariants are checked: every listed checkpoint\n" +
			"verifies and holds the marker files written before it; no sandbox is lost or left\n" +
			"creating, deleting or paused; no runsc container or process, mount, network namespace,\n" +
			"veth or nftables chain is left of a sandbox that does not exist; a stopped or suspended\n" +
			"sandbox holds no runsc process. A call that does not answer within --deadline is a\n" +
			"violation. At the end every sandbox is deleted and the host checked once more. Prints\n" +
			"operations per kind (ok / conflict / error / cut by a kill), kills survived and every\n" +
			"violation; exits 1 on a violation. Needs root, runsc, and sbxd with sbx-agent beside it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			if o.agents < 1 || o.agents > 64 {
				return fmt.Errorf("--agents %d: want 1 to 64", o.agents)
			}
			if o.duration <= 0 || o.killEvery < 0 || o.deadline <= 0 {
				return errors.New("--duration and --deadline must be positive, --kill-every not negative")
			}
			if o.maxSandboxes < 1 {
				return errors.New("--max-sandboxes must be at least 1")
			}
			rep, err := runSoak(cmd.Context(), o, a.stderr)
			if rep != nil {
				if a.output == "json" {
					_ = a.printJSON(rep)
				} else {
					a.printSoak(rep)
				}
			}
			if err != nil {
				return err
			}
			if n := len(rep.Violations); n > 0 {
				return &exitError{code: 1, err: fmt.Errorf("soak: %d violation(s)", n)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.agents, "agents", 8, "simulated agents, each working on its own sandboxes")
	f.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the agents work (checks and the final cleanup come on top)")
	f.DurationVar(&o.killEvery, "kill-every", 60*time.Second, "mean time between SIGKILLs of sbxd, jittered ±50% (0: never)")
	f.DurationVar(&o.deadline, "deadline", 3*time.Minute, "a call that has not answered after this long is a violation (a hang)")
	f.Uint64Var(&o.seed, "seed", 0, "random seed (0: random; the seed used is printed)")
	f.StringVar(&o.sbxd, "sbxd", "", "sbxd binary to start, with sbx-agent beside it (default: next to sbx, else PATH)")
	f.StringArrayVar(&o.sbxdArgs, "sbxd-arg", nil, "extra flag for sbxd (repeat), e.g. --sbxd-arg=--platform=systrap")
	f.StringVar(&o.runsc, "runsc", "runsc", "runsc binary, to list sbxd's containers")
	f.StringVar(&o.dataDir, "data-dir", "", "sbxd's data dir (default: a new temporary dir, removed at the end)")
	f.StringVar(&o.cacheDir, "cache-dir", "/var/cache/sbx", "sbxd's image build cache (shared: the default image builds from it in seconds)")
	f.StringVar(&o.netTag, "network-tag", "", "sbxd's network tag (default: a random free one starting with s)")
	f.StringVar(&o.netCIDR, "network-cidr", "", "sbxd's sandbox network (default: a random free /20 in 10.232.0.0/13)")
	f.StringVar(&o.dnsUpstream, "dns-upstream", "", "sbxd's --dns-upstream (default: sbxd's default)")
	f.IntVar(&o.pool, "pool", 1, "sbxd's warm pool size")
	f.StringVar(&o.image, "image", "default", "image of the sandboxes (built if missing; the pool keeps only default warm)")
	f.IntVar(&o.maxSandboxes, "max-sandboxes", 3, "sandboxes each agent keeps at most")
	f.BoolVar(&o.keep, "keep", false, "leave the data dir and sbxd's log (the path is printed)")
	a.addOutput(cmd)
	return cmd
}

// soakOpStats counts the outcomes of one kind of operation.
type soakOpStats struct {
	Kind        string `json:"kind"`
	OK          int    `json:"ok"`
	Conflict    int    `json:"conflict"`
	Error       int    `json:"error"`
	Interrupted int    `json:"interrupted_by_kill"`
}

// soakReport is what sbx bench soak prints.
type soakReport struct {
	Seed       uint64         `json:"seed"`
	Agents     int            `json:"agents"`
	Duration   string         `json:"duration"`
	Ops        []soakOpStats  `json:"operations"`
	Kills      int            `json:"kills_survived"`
	RestartMS  []float64      `json:"restart_ms"`
	Checks     int            `json:"checks"`
	Errors     map[string]int `json:"errors"`
	Conflicts  map[string]int `json:"conflicts"`
	Violations []string       `json:"violations"`
	DataDir    string         `json:"data_dir,omitempty"`
}

func (a *app) printSoak(r *soakReport) {
	var rows [][]string
	total := soakOpStats{Kind: "all"}
	for _, o := range r.Ops {
		rows = append(rows, []string{o.Kind, strconv.Itoa(o.OK), strconv.Itoa(o.Conflict), strconv.Itoa(o.Error), strconv.Itoa(o.Interrupted)})
		total.OK += o.OK
		total.Conflict += o.Conflict
		total.Error += o.Error
		total.Interrupted += o.Interrupted
	}
	rows = append(rows, []string{"all", strconv.Itoa(total.OK), strconv.Itoa(total.Conflict), strconv.Itoa(total.Error), strconv.Itoa(total.Interrupted)})
	fmt.Fprintf(a.stdout, "soak: %d agents, %s, seed %d\n", r.Agents, r.Duration, r.Seed)
	a.table("OPERATION\tOK\tCONFLICT\tERROR\tCUT_BY_KILL", rows)
	restart := "-"
	if len(r.RestartMS) > 0 {
		restart = fmt.Sprintf("restart to first answer p50 %.0f ms, max %.0f ms", percentile(r.RestartMS, 0.5), slices.Max(r.RestartMS))
	}
	fmt.Fprintf(a.stdout, "kills survived: %d (%s); invariant checks: %d\n", r.Kills, restart, r.Checks)
	for _, l := range []struct {
		title string
		m     map[string]int
	}{{"conflicts answered (409)", r.Conflicts}, {"errors answered", r.Errors}} {
		if len(l.m) == 0 {
			continue
		}
		fmt.Fprintln(a.stdout, l.title+":")
		for _, k := range slices.Sorted(maps.Keys(l.m)) {
			fmt.Fprintf(a.stdout, "  %4d× %s\n", l.m[k], clean(k))
		}
	}
	fmt.Fprintf(a.stdout, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(a.stdout, "  - %s\n", clean(v))
	}
	if r.DataDir != "" {
		fmt.Fprintf(a.stdout, "data dir kept: %s\n", r.DataDir)
	}
}

// soakDaemon is the sbxd the soak starts, kills and starts again.
type soakDaemon struct {
	bin      string
	args     []string
	dataDir  string
	netnsDir string
	sock     string
	logPath  string
	netTag   string
	netCIDR  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	killed  bool          // the soak killed or stopped it
	exited  chan struct{} // closed when the process ends
	surpise func(string)  // called when it ends on its own
}

// start starts sbxd and waits until it answers (at most wait).
func (d *soakDaemon) start(c *client.Client, wait time.Duration) error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== sbx bench soak: starting sbxd at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(d.bin, d.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a ^C of the soak does not reach it
	// before the soak cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	d.mu.Lock()
	d.cmd, d.killed, d.exited = cmd, false, exited
	d.mu.Unlock()
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		killed := d.killed
		d.mu.Unlock()
		close(exited)
		if !killed && d.surpise != nil {
			d.surpise(fmt.Sprintf("sbxd exited on its own (%v); log: %s", err, d.logPath))
		}
	}()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = c.Health(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("sbxd exited at start; its log %s ends:\n%s", d.logPath, tail(d.logPath, 2000))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("sbxd did not answer within %v: %v", wait, err)
}

// kill kills sbxd with SIGKILL, as a crash would, and waits for it.
func (d *soakDaemon) kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.killed = true
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// stop stops sbxd with SIGTERM (SIGKILL after 30 s).
func (d *soakDaemon) stop() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.killed = true
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// tail is the last n bytes of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// findSbxd is the sbxd binary: the flag, next to this sbx, or on PATH.
func findSbxd(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "sbxd")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("sbxd")
}

// freeNetwork picks a network tag and a /20 that no interface, route or
// nftables table of the host uses, so the soak's sbxd cannot meet another.
func freeNetwork(tag, cidr string) (string, string, error) {
	links, err := linkList()
	if err != nil {
		return "", "", err
	}
	var used []netip.Prefix
	addrs, _ := netlink.AddrList(nil, netlink.FAMILY_V4)
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.IPNet.String()); err == nil {
			used = append(used, p.Masked())
		}
	}
	routes, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
	for _, r := range routes {
		if r.Dst != nil {
			if p, err := netip.ParsePrefix(r.Dst.String()); err == nil && p.Bits() > 0 {
				used = append(used, p.Masked())
			}
		}
	}
	tables := nftTables()
	tagFree := func(t string) bool {
		if tables[t] {
			return false
		}
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, t+"-") {
				return false
			}
		}
		return true
	}
	cidrFree := func(c netip.Prefix) bool {
		for _, u := range used {
			if u.Overlaps(c) {
				return false
			}
		}
		return true
	}
	const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
	for i := 0; i < 100 && tag == ""; i++ {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		t := "s" + string([]byte{alnum[int(b[0])%36], alnum[int(b[1])%36], alnum[int(b[2])%36]})
		if tagFree(t) {
			tag = t
		}
	}
	for i := 0; i < 100 && cidr == ""; i++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		p := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/20", 232+int(b[0])%8, (int(b[1])%16)*16))
		if cidrFree(p) {
			cidr = p.String()
		}
	}
	if tag == "" || cidr == "" {
		return "", "", errors.New("no free network tag or CIDR found; give --network-tag and --network-cidr")
	}
	return tag, cidr, nil
}

// soak is one run of sbx bench soak.
type soak struct {
	o      soakOptions
	log    io.Writer
	d      *soakDaemon
	c      *client.Client
	rng    *mrand.Rand
	gate   *soakGate
	epoch  atomic.Int64 // counts kills; an operation that sees it change was cut by one
	agents []*soakAgent

	mu         sync.Mutex
	stats      map[string]*soakOpStats
	errs       map[string]int
	conflicts  map[string]int
	violations []string
	kills      int
	checks     int
	restartMS  []float64
	logOffset  int
}

// violation records a broken invariant.
func (s *soak) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
	fmt.Fprintf(s.log, "VIOLATION: %s\n", msg)
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func runSoak(ctx context.Context, o soakOptions, log io.Writer) (*soakReport, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("sbx bench soak starts its own sbxd: run it as root")
	}
	bin, err := findSbxd(o.sbxd)
	if err != nil {
		return nil, fmt.Errorf("sbxd not found (give --sbxd): %w", err)
	}
	if o.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, x := range b {
			o.seed = o.seed<<8 | uint64(x)
		}
	}
	tag, cidr, err := freeNetwork(o.netTag, o.netCIDR)
	if err != nil {
		return nil, err
	}
	dataDir := o.dataDir
	base := ""
	if dataDir == "" {
		if base, err = os.MkdirTemp("", "sbx-soak-"); err != nil {
			return nil, err
		}
		dataDir = filepath.Join(base, "data")
	} else if base, err = filepath.Abs(filepath.Dir(dataDir)); err != nil {
		return nil, err
	}
	if dataDir, err = filepath.Abs(dataDir); err != nil {
		return nil, err
	}
	d := &soakDaemon{
		bin: bin, dataDir: dataDir, netTag: tag, netCIDR: cidr,
		netnsDir: filepath.Join("/run", "sbx-soak-"+tag+"-netns"),
		sock:     filepath.Join(dataDir, "sbx.sock"),
		logPath:  filepath.Join(base, "sbxd-soak-"+tag+".log"),
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	d.args = []string{"--data-dir", dataDir, "--socket", d.sock, "--cache-dir", o.cacheDir, "--netns-dir", d.netnsDir,
		"--pool", strconv.Itoa(o.pool), "--network-tag", tag, "--network-cidr", cidr, "--log-level", "debug"}
	if o.dnsUpstream != "" {
		d.args = append(d.args, "--dns-upstream", o.dnsUpstream)
	}
	d.args = append(d.args, o.sbxdArgs...)
	c, err := client.New(client.WithSocket(d.sock))
	if err != nil {
		return nil, err
	}
	s := &soak{o: o, log: log, d: d, c: c, rng: mrand.New(mrand.NewPCG(o.seed, 1)), gate: newSoakGate(),
		stats: map[string]*soakOpStats{}, errs: map[string]int{}, conflicts: map[string]int{}}
	d.surpise = func(msg string) { s.violation("%s", msg) }
	s.logf("soak: seed %d, sbxd %s, data dir %s, network tag %s, CIDR %s, log %s", o.seed, bin, dataDir, tag, cidr, d.logPath)
	defer func() {
		d.stop()
		s.cleanupHost()
		if !o.keep {
			if o.dataDir == "" {
				_ = os.RemoveAll(base)
			} else {
				_ = os.RemoveAll(dataDir)
			}
		}
	}()
	if err := d.start(c, 2*time.Minute); err != nil {
		return nil, err
	}
	if err := s.ensureImage(ctx); err != nil {
		return nil, err
	}
	err = s.run(ctx)
	rep := s.report()
	if o.keep {
		rep.DataDir = dataDir
	}
	return rep, err
}

// ensureImage builds the soak's image in its sbxd (from the cache, when
// the cache holds its recipe's output).
func (s *soak) ensureImage(ctx context.Context) error {
	if _, err := s.c.Images.Get(ctx, s.o.image); err == nil {
		return nil
	} else if !errors.Is(err, client.ErrImageNotFound) {
		return err
	}
	if s.o.image != "default" {
		return fmt.Errorf("image %q: not in the soak's sbxd (only default is built)", s.o.image)
	}
	start := time.Now()
	s.logf("building the default image (from %s when cached)", s.o.cacheDir)
	bctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	if _, err := s.c.Images.Build(bctx, api.BuildImageRequest{Name: "default"}, nil); err != nil {
		return fmt.Errorf("build the default image: %w", err)
	}
	s.logf("default image ready in %.1fs", time.Since(start).Seconds())
	return nil
}

// run runs the agents and the killer for the duration, then the final
// checks and the cleanup.
func (s *soak) run(ctx context.Context) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < s.o.agents; i++ {
		ag := newSoakAgent(s, i, s.rng.Uint64())
		s.agents = append(s.agents, ag)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ag.loop(actx)
		}()
	}
	end := time.Now().Add(s.o.duration)
	var runErr error
	for time.Now().Before(end) && runErr == nil {
		wait := time.Until(end)
		if s.o.killEvery > 0 {
			j := time.Duration(float64(s.o.killEvery) * (0.5 + s.rng.Float64()))
			wait = min(wait, j)
		}
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
		case <-time.After(wait):
		}
		if runErr != nil || !time.Now().Before(end) {
			break
		}
		runErr = s.killAndCheck(ctx)
	}
	// Hold the agents (letting what runs finish), then the final checks.
	s.gate.close()
	s.gate.stop()
	s.gate.waitIdle()
	cancel()
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	s.logf("agents done; final checks")
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Minute)
	defer fcancel()
	s.check(fctx, "final check")
	s.finalContent(fctx)
	s.deleteAll(fctx)
	s.checkEmpty(fctx)
	return nil
}

// killAndCheck kills sbxd with SIGKILL in the middle of what the agents
// do, starts it again and checks the invariants with the agents held.
func (s *soak) killAndCheck(ctx context.Context) error {
	s.gate.close()
	s.epoch.Add(1)
	s.d.kill()
	s.gate.waitIdle()
	s.mu.Lock()
	s.kills++
	n := s.kills
	s.mu.Unlock()
	start := time.Now()
	if err := s.d.start(s.c, 3*time.Minute); err != nil {
		s.violation("restart after kill %d: %v", n, err)
		return err
	}
	s.mu.Lock()
	s.restartMS = append(s.restartMS, ms(time.Since(start)))
	s.mu.Unlock()
	s.logf("kill %d: sbxd answers again after %.0f ms; checking", n, ms(time.Since(start)))
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	s.check(cctx, fmt.Sprintf("after kill %d", n))
	cancel()
	s.gate.open()
	return nil
}

// count records one operation's outcome.
func (s *soak) count(kind, outcome, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[kind]
	if st == nil {
		st = &soakOpStats{Kind: kind}
		s.stats[kind] = st
	}
	switch outcome {
	case "ok":
		st.OK++
	case "conflict":
		st.Conflict++
		s.conflicts[kind+": "+msg]++
	case "interrupted":
		st.Interrupted++
	default:
		st.Error++
		s.errs[kind+": "+msg]++
	}
}

func (s *soak) report() *soakReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &soakReport{Seed: s.o.seed, Agents: s.o.agents, Duration: s.o.duration.String(), Kills: s.kills,
		RestartMS: slices.Clone(s.restartMS), Checks: s.checks, Errors: map[string]int{}, Violations: slices.Clone(s.violations)}
	for _, k := range soakKinds {
		if st := s.stats[k]; st != nil {
			r.Ops = append(r.Ops, *st)
		} else {
			r.Ops = append(r.Ops, soakOpStats{Kind: k})
		}
	}
	for k, v := range s.errs {
		r.Errors[k] = v
	}
	r.Conflicts = maps.Clone(s.conflicts)
	if r.Violations == nil {
		r.Violations = []string{}
	}
	return r
}

// soakGate holds the agents while sbxd is down or being checked.
type soakGate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	stopped bool
	active  int
}

func newSoakGate() *soakGate {
	g := &soakGate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// enter waits until the gate is open and counts the caller in; false
// when the soak is over.
func (g *soakGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.closed && !g.stopped {
		g.cond.Wait()
	}
	if g.stopped {
		return false
	}
	g.active++
	return true
}

func (g *soakGate) leave() {
	g.mu.Lock()
	g.active--
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *soakGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

func (g *soakGate) open() {
	g.mu.Lock()
	g.closed = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *soakGate) stop() {
	g.mu.Lock()
	g.stopped = true
	g.cond.Broadcast()
	g.mu.Unlock()
}

// waitIdle waits until no agent is inside an operation.
func (g *soakGate) waitIdle() {
	g.mu.Lock()
	for g.active > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}
