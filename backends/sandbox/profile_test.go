package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

func TestBuildProfile(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(p string) string {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home := mk("home/x")
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	envFile := mk("work/.env.production")
	os.WriteFile(envFile, []byte("k=v"), 0o600)
	envDir := mk("work/a/.envs/x")
	os.MkdirAll(envDir, 0o755)
	deep := mk("work/1/2/3/4/5/.env")
	os.WriteFile(deep, nil, 0o600)
	policyDeny := mk("work/secrets.json")
	os.WriteFile(policyDeny, nil, 0o600)
	outside := mk("elsewhere/.env")
	os.WriteFile(outside, nil, 0o600)

	spec := Spec{
		Env: []string{"HOME=/tmp/h", "PATH=/usr/bin"},
		Scope: wire.Scope{
			FSGrants: []wire.FSGrant{{Path: filepath.Join(root, "work"), Mode: "rw"}, {Path: filepath.Join(root, "home"), Mode: "r"}},
			FSDeny:   []string{policyDeny, outside},
		},
	}
	p, err := BuildProfile(spec, ProfileOptions{UserHome: home})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{deep, envFile, policyDeny}
	slices.Sort(wantFiles)
	if !slices.Equal(p.DenyFiles, wantFiles) {
		t.Errorf("deny files %v, want %v (every depth; the one outside every grant is not listed)", p.DenyFiles, wantFiles)
	}
	wantDirs := []string{filepath.Join(root, "work/a/.envs"), filepath.Join(home, ".ssh")}
	slices.Sort(wantDirs)
	if !slices.Equal(p.DenyDirs, wantDirs) {
		t.Errorf("deny dirs %v, want %v", p.DenyDirs, wantDirs)
	}
	if p.Home != "/tmp/h" || p.Network.Posture != wire.PostureOff || !slices.Equal(p.EnvNames, []string{"HOME", "PATH"}) {
		t.Errorf("profile %+v", p)
	}

	// Refusals.
	link := filepath.Join(root, "work", ".env")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildProfile(spec, ProfileOptions{UserHome: home}); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("symlinked .env: err %v, want ErrUnsafePath", err)
	}
	os.Remove(link)
	for name, g := range map[string]wire.FSGrant{
		"root grant":    {Path: "/", Mode: "r"},
		"proc grant":    {Path: "/proc/1", Mode: "r"},
		"unclean grant": {Path: root + "/work/../work", Mode: "r"},
		// Where every call keeps its private run directories (code.run's
		// bridge FIFOs): TestNoCrossRunBridge (tools/coderun).
		"temporary directory grant": {Path: realOr(os.TempDir()), Mode: "r"},
	} {
		s := spec
		s.Scope.FSGrants = []wire.FSGrant{g}
		if _, err := BuildProfile(s, ProfileOptions{UserHome: home}); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%s: err %v, want ErrUnsafePath", name, err)
		}
	}
	if _, err := BuildProfile(spec, ProfileOptions{UserHome: home, MaxScanEntries: 3}); !errors.Is(err, ErrUnsafePath) || !errors.Is(err, ErrScanBudget) {
		t.Errorf("scan budget exhausted: err %v, want a refusal", err)
	}
	sshLinkHome := mk("home/y")
	os.MkdirAll(sshLinkHome, 0o755)
	os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(sshLinkHome, ".ssh"))
	if _, err := BuildProfile(spec, ProfileOptions{UserHome: sshLinkHome}); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("symlinked ~/.ssh: err %v, want ErrUnsafePath", err)
	}
}
