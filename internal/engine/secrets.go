package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/disk"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/network"
	"github.com/sbxhq/sbx/internal/runtime"
	"github.com/sbxhq/sbx/internal/secret"
	"github.com/sbxhq/sbx/internal/store"
)

// Secrets never enter a sandbox. The engine keeps them in the sandbox's
// record (store.SecretSet: values sealed by the Keeper, whose key lives in
// the data dir), gives the sandbox's processes a placeholder in an env var
// named after each, and hands the values to the network (network.Rules
// Secrets), whose egress proxy swaps them in where the rules allow.
//
// The trust store. A sandbox with secrets has a CA of its own. At a cold
// boot a sandbox that has a CA gets it in its trust store: its dir
// /.sbx/ca (bundle.pem: the image's system bundle and the CA; ca.pem: the
// CA alone) and, when the image has one, its system bundle
// (/etc/ssl/certs/ca-certificates.crt) replaced by bundle.pem, both
// read-only mounts of host files; processes get SSL_CERT_FILE and the
// variables Python, Node, curl and git read. Whether those mounts exist
// (SecretSet.Mounted) is fixed at the cold boot: a restore must have the
// mounts of its capture, so forks, starts from a snapshot and resumes keep
// the flag of their snapshot, and a CA made while a sandbox runs (its
// first secret put then) reaches its trust store at its next cold boot.
// A CA, once made, stays with the sandbox (and its copies) for good.

// caDir is the host dir mounted at /.sbx/ca in sandbox id.
func (e *Engine) caDir(id string) string { return filepath.Join(e.sandboxDir(id), "ca") }

// Trust store paths inside a sandbox.
const (
	sandboxCADir    = "/.sbx/ca"
	sandboxCABundle = sandboxCADir + "/bundle.pem"
	sandboxCAOnly   = sandboxCADir + "/ca.pem"
	// maxSystemBundle bounds the image's bundle sbxd reads.
	maxSystemBundle = 8 << 20
)

// systemBundles are where images keep their system trust store, in the
// order tried: Go's crypto/x509 list (root_linux.go). Debian, Ubuntu,
// Alpine, Arch: the first; RHEL, CentOS, Fedora, Amazon Linux: the second
// (through links into /etc/pki/ca-trust); openSUSE: the third.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// imageBundle reads the system trust store of the image whose root
// filesystem is rootfs: the first of systemBundles there, its links
// resolved inside the image. path is the file it resolves to, as the
// sandbox sees it ("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"),
// "" when the image has none.
//
// Errors: a bundle that cannot be read (more than maxSystemBundle bytes,
// an open or read failure other than its absence).
func imageBundle(rootfs string) (b []byte, path string, err error) {
	for _, p := range systemBundles {
		b, resolved, ok, err := disk.ReadFileInRoot(rootfs, strings.TrimPrefix(p, "/"), maxSystemBundle)
		if err != nil {
			return nil, "", fmt.Errorf("the image's trust store %s: %w", p, err)
		}
		if ok {
			return b, "/" + resolved, nil
		}
	}
	return nil, "", nil
}

// caEnv are the variables that point TLS clients at the sandbox's trust
// store (OpenSSL and Go, Python requests, curl, git, Node).
var caEnv = map[string]string{
	"SSL_CERT_FILE":       sandboxCABundle,
	"REQUESTS_CA_BUNDLE":  sandboxCABundle,
	"CURL_CA_BUNDLE":      sandboxCABundle,
	"GIT_SSL_CAINFO":      sandboxCABundle,
	"NODE_EXTRA_CA_CERTS": sandboxCAOnly,
}

// secretEnv adds sb's placeholders, and the trust store's variables when
// its CA is mounted, to env.
func secretEnv(sb *store.Sandbox, env map[string]string) {
	s := sb.Secrets
	if s == nil {
		return
	}
	if s.Mounted {
		for k, v := range caEnv {
			env[k] = v
		}
	}
	for _, x := range s.List {
		env[x.Name] = x.Placeholder
	}
}

// secretMounts are the trust store's mounts of sb (none without a mounted
// CA), after writing their host files. cold: sb boots cold, which decides
// whether it has them (SecretSet.Mounted); a restore keeps its capture's.
func (e *Engine) secretMounts(sb *store.Sandbox, cold bool) ([]runtime.Mount, error) {
	s := sb.Secrets
	if s == nil {
		return nil, nil
	}
	if cold {
		s.Mounted = len(s.CACert) > 0
	}
	if !s.Mounted {
		return nil, nil
	}
	sys, sysPath, err := imageBundle(e.images.RootFS(sb.ImageID))
	if err != nil {
		return nil, err
	}
	if sysPath == "" {
		e.log.Warn("secrets: the image has no system trust store in a usual place; TLS clients that honour SSL_CERT_FILE and the like trust only the sandbox's CA",
			"sandbox", sb.Name, "image", sb.ImageID, "tried", strings.Join(systemBundles, " "))
	}
	bundle := append(slices.Clip(sys), '\n')
	bundle = append(bundle, s.CACert...)
	dir := e.caDir(sb.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"bundle.pem": bundle, "ca.pem": s.CACert} {
		if err := writeHostFile(filepath.Join(dir, name), b); err != nil {
			return nil, fmt.Errorf("the sandbox's trust store: %w", err)
		}
	}
	mounts := []runtime.Mount{{Source: dir, Destination: sandboxCADir, ReadOnly: true}}
	if sysPath != "" {
		// Over the file the image's links lead to: every path that
		// names it sees the bundle.
		mounts = append(mounts, runtime.Mount{Source: filepath.Join(dir, "bundle.pem"), Destination: sysPath, ReadOnly: true})
	}
	return mounts, nil
}

// keepCaptureMounts gives sb, about to be restored in place from sn, the
// trust store mounts sn's capture had (a restore must have them): its CA
// stays, only whether it is mounted follows the snapshot.
func keepCaptureMounts(sb *store.Sandbox, sn *store.Snapshot) {
	var sh sandboxShape
	if sb.Secrets == nil || json.Unmarshal(sn.Shape, &sh) != nil {
		return
	}
	sb.Secrets.Mounted = sh.Secrets != nil && sh.Secrets.Mounted
}

// writeHostFile writes b to path, a file of a host-owned dir, in place
// (a mount holds its inode), never through a symlink.
func writeHostFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sealSecrets returns base with the secrets of in (validated: parsed holds
// their rules) added or replacing those of the same name; with replace,
// the secrets of base that in does not name go. A secret that keeps its
// name keeps its placeholder. A set that gets its first secret gets a CA.
//
// Errors: ErrInvalidArgument "secrets: ..." when the result holds more
// than secret.MaxSecrets.
func (e *Engine) sealSecrets(id string, base *store.SecretSet, in []api.Secret, parsed [][]secret.Rule, replace bool) (*store.SecretSet, error) {
	out := base.Clone()
	if out == nil {
		out = &store.SecretSet{}
	}
	old := map[string]store.StoredSecret{}
	for _, x := range out.List {
		old[x.Name] = x
	}
	if replace {
		out.List = nil
	}
	// A set keeps the key it was sealed with; a new set on a cluster's
	// node is sealed with the cluster's.
	if len(out.List) == 0 && len(out.CACert) == 0 {
		out.Keyring = ""
		if e.clusterKeeper != nil {
			out.Keyring = store.KeyringCluster
		}
	}
	k := e.keeperOf(out)
	if k == nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the secrets of this sandbox are sealed with the cluster's key, and this sbxd has no cluster key ($SBX_CLUSTER_KEY)")
	}
	now := time.Now().UTC()
	for i, s := range in {
		ph := secret.NewPlaceholder()
		if o, ok := old[s.Name]; ok {
			ph = o.Placeholder
		}
		x := store.StoredSecret{Name: s.Name, Placeholder: ph, Rules: secret.API(parsed[i]),
			Sealed: k.Seal([]byte(s.Value), sealPurpose(s.Name)), ValueBytes: len(s.Value), UpdateTime: now}
		if j := slices.IndexFunc(out.List, func(y store.StoredSecret) bool { return y.Name == s.Name }); j >= 0 {
			out.List[j] = x
		} else {
			out.List = append(out.List, x)
		}
	}
	if len(out.List) > secret.MaxSecrets {
		return nil, errdefs.Invalid("secrets", "the sandbox would have %d secrets, at most %d", len(out.List), secret.MaxSecrets)
	}
	slices.SortFunc(out.List, func(a, b store.StoredSecret) int { return strings.Compare(a.Name, b.Name) })
	if len(out.List) > 0 && len(out.CACert) == 0 {
		cert, key, err := k.NewCA(id)
		if err != nil {
			return nil, fmt.Errorf("make the sandbox's CA: %w", err)
		}
		out.CACert, out.CAKey = cert, key
	}
	return out, nil
}

func sealPurpose(name string) string { return "secret:" + name }

// keeperOf is the Keeper that opens set s (its Keyring): nil when it was
// sealed with the cluster's key and this sbxd has none.
func (e *Engine) keeperOf(s *store.SecretSet) *secret.Keeper {
	if s != nil && s.Keyring == store.KeyringCluster {
		return e.clusterKeeper
	}
	return e.keeper
}

// secretsStay reports whether set s holds secrets that cannot leave this
// node: sealed with its own key, which no other node has.
func secretsStay(s *store.SecretSet) bool {
	return s != nil && (len(s.List) > 0 || len(s.CACert) > 0) && s.Keyring != store.KeyringCluster
}

// openSecrets returns what the egress proxy needs of sb's secrets, values
// opened, or nil when it has none. A value or CA that does not open
// (another data dir's key) is left out and logged, without the value.
func (e *Engine) openSecrets(sb *store.Sandbox) *network.Secrets {
	s := sb.Secrets
	if s == nil || len(s.List) == 0 || len(s.CACert) == 0 {
		return nil
	}
	k := e.keeperOf(s)
	if k == nil {
		e.log.Warn("secrets: sealed with the cluster's key, and this sbxd has none ($SBX_CLUSTER_KEY); its secrets are not used", "sandbox", sb.Name)
		return nil
	}
	ca, err := k.OpenCA(s.CACert, s.CAKey)
	if err != nil {
		e.log.Warn("secrets: the sandbox's CA does not open; its secrets are not used", "sandbox", sb.Name, "err", err)
		return nil
	}
	out := &network.Secrets{CA: ca}
	for _, x := range s.List {
		v, err := k.Open(x.Sealed, sealPurpose(x.Name))
		if err != nil {
			e.log.Warn("secrets: a value does not open; it is not used", "sandbox", sb.Name, "secret", x.Name, "err", err)
			continue
		}
		rules, err := secret.ParseRules("rules", x.Rules)
		if err != nil {
			e.log.Warn("secrets: rules of the record do not parse; the secret is not used", "sandbox", sb.Name, "secret", x.Name, "err", err)
			continue
		}
		out.List = append(out.List, network.Secret{Name: x.Name, Placeholder: x.Placeholder, Value: v, Rules: rules})
	}
	return out
}

// secretList is the API's view of s: never a value.
func secretList(s *store.SecretSet) api.SecretList {
	out := api.SecretList{Secrets: []api.SecretInfo{}}
	if s == nil {
		return out
	}
	for _, x := range s.List {
		out.Secrets = append(out.Secrets, secretInfo(x))
	}
	return out
}

func secretInfo(x store.StoredSecret) api.SecretInfo {
	return api.SecretInfo{Name: x.Name, Placeholder: x.Placeholder, Rules: x.Rules, ValueBytes: x.ValueBytes, UpdateTime: x.UpdateTime}
}

// Secrets lists a sandbox's secrets, by name, without their values.
//
// Errors: ErrSandboxNotFound.
func (e *Engine) Secrets(ctx context.Context, idOrName string) (api.SecretList, error) {
	sb, err := e.Get(ctx, idOrName)
	if err != nil {
		return api.SecretList{}, err
	}
	return secretList(sb.Secrets), nil
}

// SetSecrets replaces all of a sandbox's secrets with in (an empty list
// removes them); a secret that keeps its name keeps its placeholder. A
// running sandbox's proxy uses them within the call; its processes started
// from then on see the new placeholders. It waits for an operation in
// progress on the sandbox.
//
// Errors: ErrSandboxNotFound; ErrInvalidArgument naming the field
// ("secrets[1].rules[0].host: ...").
func (e *Engine) SetSecrets(ctx context.Context, idOrName string, in []api.Secret) (api.SecretList, error) {
	parsed, err := secret.Validate("secrets", in)
	if err != nil {
		return api.SecretList{}, err
	}
	return e.updateSecrets(ctx, idOrName, func(sb *store.Sandbox) (*store.SecretSet, error) {
		return e.sealSecrets(sb.ID, sb.Secrets, in, parsed, true)
	})
}

// PutSecret adds secret name to a sandbox, or replaces its value and
// rules; a nil value keeps the value of the secret that exists.
//
// Errors: ErrSandboxNotFound; ErrInvalidArgument naming the field
// ("name", "value", "rules[0].methods[0]", "secrets" over the limit).
func (e *Engine) PutSecret(ctx context.Context, idOrName, name string, req api.PutSecretRequest) (api.SecretInfo, error) {
	if err := secret.ValidateName("name", name); err != nil {
		return api.SecretInfo{}, err
	}
	if req.Value != nil {
		if err := secret.ValidateValue("value", *req.Value); err != nil {
			return api.SecretInfo{}, err
		}
	}
	rules, err := secret.ParseRules("rules", req.Rules)
	if err != nil {
		return api.SecretInfo{}, err
	}
	list, err := e.updateSecrets(ctx, idOrName, func(sb *store.Sandbox) (*store.SecretSet, error) {
		if req.Value != nil {
			return e.sealSecrets(sb.ID, sb.Secrets, []api.Secret{{Name: name, Value: *req.Value}}, [][]secret.Rule{rules}, false)
		}
		out := sb.Secrets.Clone()
		if out != nil {
			for i := range out.List {
				if out.List[i].Name == name {
					out.List[i].Rules = secret.API(rules)
					out.List[i].UpdateTime = time.Now().UTC()
					return out, nil
				}
			}
		}
		return nil, errdefs.Invalid("value", "secret %s does not exist: give its value", name)
	})
	if err != nil {
		return api.SecretInfo{}, err
	}
	for _, x := range list.Secrets {
		if x.Name == name {
			return x, nil
		}
	}
	return api.SecretInfo{}, fmt.Errorf("secret %s: not recorded", name)
}

// DeleteSecret removes secret name from a sandbox: the proxy no longer
// puts it in; processes that hold its placeholder keep a worthless string.
//
// Errors: ErrSandboxNotFound; ErrNotFound when the sandbox has no secret
// of that name.
func (e *Engine) DeleteSecret(ctx context.Context, idOrName, name string) error {
	_, err := e.updateSecrets(ctx, idOrName, func(sb *store.Sandbox) (*store.SecretSet, error) {
		out := sb.Secrets.Clone()
		if out != nil {
			n := len(out.List)
			out.List = slices.DeleteFunc(out.List, func(x store.StoredSecret) bool { return x.Name == name })
			if len(out.List) < n {
				return out, nil
			}
		}
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q has no secret named %q", sb.Name, name)
	})
	return err
}

// updateSecrets replaces sb's secrets with what change makes of them,
// under the sandbox's lock, and gives a running sandbox's proxy the new
// ones. On error nothing changed.
func (e *Engine) updateSecrets(ctx context.Context, idOrName string, change func(sb *store.Sandbox) (*store.SecretSet, error)) (api.SecretList, error) {
	sb, unlock, err := e.lockSandbox(ctx, idOrName, "secrets", lockOrWait)
	if err != nil {
		return api.SecretList{}, err
	}
	defer unlock()
	next, err := change(sb)
	if err != nil {
		return api.SecretList{}, err
	}
	prev := sb.Secrets
	sb.Secrets = next
	if err := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); err != nil {
		return api.SecretList{}, err
	}
	if err := e.net.Update(sb.ID, e.rulesOf(sb)); err != nil {
		sb.Secrets = prev
		if rerr := e.st.UpdateSandbox(context.WithoutCancel(ctx), sb); rerr != nil {
			e.log.Error("secrets: roll back the record", "sandbox", sb.Name, "err", rerr)
		}
		_ = e.net.Update(sb.ID, e.rulesOf(sb))
		return api.SecretList{}, fmt.Errorf("apply secrets to %s: %w", sb.Name, err)
	}
	e.log.Info("secrets set", "sandbox", sb.Name, "count", len(next.List))
	return secretList(next), nil
}
