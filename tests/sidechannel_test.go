package tests

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// dnsServer is a tiny UDP DNS responder on 127.x.y.z:53 that records every
// name it is asked and answers A 127.0.0.1 (AAAA: no records). It is the
// gateway's only nameserver in startWithResolver, so any lookup the
// gateway makes shows here.
type dnsServer struct {
	addr  string
	conn  *net.UDPConn
	mu    sync.Mutex
	names []string
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a DNS server on port 53 and a private mount namespace need root")
	}
	var conn *net.UDPConn
	var ip string
	for i := 0; i < 20 && conn == nil; i++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		ip = fmt.Sprintf("127.53.%d.%d", b[0], 1+b[1]%250)
		conn, _ = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: 53})
	}
	if conn == nil {
		t.Skip("could not listen on a 127.53.x.y:53 address")
	}
	s := &dnsServer{addr: ip, conn: conn}
	go s.serve()
	t.Cleanup(func() { _ = conn.Close() })
	return s
}

func (s *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		q := buf[:n]
		name, qtype, end, ok := parseQuestion(q)
		if !ok {
			continue
		}
		s.mu.Lock()
		s.names = append(s.names, name)
		s.mu.Unlock()
		// Answer: the header with QR, RD, RA set and the question copied.
		resp := append([]byte(nil), q[:end]...)
		resp[2], resp[3] = 0x81, 0x80
		binary.BigEndian.PutUint16(resp[4:], 1) // QDCOUNT
		binary.BigEndian.PutUint16(resp[8:], 0) // NSCOUNT
		binary.BigEndian.PutUint16(resp[10:], 0)
		if qtype == 1 { // A
			binary.BigEndian.PutUint16(resp[6:], 1)
			resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 0, 1)
		} else {
			binary.BigEndian.PutUint16(resp[6:], 0)
		}
		_, _ = s.conn.WriteToUDP(resp, from)
	}
}

// parseQuestion reads the first question of a DNS query.
func parseQuestion(q []byte) (name string, qtype uint16, end int, ok bool) {
	if len(q) < 12 {
		return "", 0, 0, false
	}
	var labels []string
	i := 12
	for i < len(q) {
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return "", 0, 0, false
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return "", 0, 0, false
	}
	return strings.ToLower(strings.Join(labels, ".")), binary.BigEndian.Uint16(q[i:]), i + 4, true
}

// asked returns the names queried that contain sub.
func (s *dnsServer) asked(sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.names {
		if strings.Contains(n, sub) {
			out = append(out, n)
		}
	}
	return out
}

// startWithResolver starts d's gateway in a private mount namespace whose
// /etc/resolv.conf names only dns, so every lookup the real binary makes
// (Go's resolver, the egress proxy, anything) reaches the test's server.
func startWithResolver(t *testing.T, d *deployment, dns *dnsServer) *gateway {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	conf := filepath.Join(d.dir, "resolv.conf")
	writeFile(t, conf, []byte("nameserver "+dns.addr+"\noptions timeout:1 attempts:1 ndots:1\n"))
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount --bind "$0" /etc/resolv.conf && exec "$@"`, conf,
		gatewayBin, "serve", "--config", d.configPath, "--listen", "127.0.0.1:0"}
	g := &gateway{dep: d, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(unshare, args...)
	g.cmd.Dir, g.cmd.Env = d.dir, d.env
	g.cmd.SysProcAttr = dieWithParent()
	g.cmd.Stdout = g.stdout
	errPipe, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("start gateway in a mount namespace: %v", err)
	}
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			g.stderr.Write([]byte(line + "\n"))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && listenRe.MatchString(rec.Addr) {
				select {
				case addrCh <- rec.Addr:
				default:
				}
			}
		}
		_, _ = io.Copy(g.stderr, errPipe)
		g.waitErr = g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		g.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("gateway stderr:\n%s", tail(g.stderr.String(), 12000))
		}
	})
	select {
	case addr := <-addrCh:
		g.baseURL = "http://" + addr
	case <-g.done:
		t.Fatalf("gateway exited before listening (%v):\n%s", g.waitErr, tail(g.stderr.String(), 8000))
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not listen within 60s:\n%s", tail(g.stderr.String(), 8000))
	}
	return g
}

// TestNoDNSBeforeOrWithoutDecision: a dry run of http.get resolves no name,
// whatever the posture (issue #13: an unrecorded exfiltration channel), and
// neither does a real call the policy or the allowlist refuses. The same
// gateway does query the test's DNS server for an allowed real call, so
// the silence is not a wiring accident.
func TestNoDNSBeforeOrWithoutDecision(t *testing.T) {
	t.Parallel()
	dns := startDNS(t)
	d := newDeployment(t, storeSQLite)
	rego, err := os.ReadFile(filepath.Join("testdata", "sandbox", "sandbox.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego)
	tag := randHex(t, 4)
	zone := "x" + tag + ".exfil.test"
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull:   map[string]any{"tools": []string{"http.get"}, "network": map[string]any{"posture": "full", "allow": []string{}}},
		agentNoExec: map[string]any{"tools": []string{"http.get"}, "network": map[string]any{"posture": "allowlist", "allow": []string{"listed." + zone}}},
		agentNarrow: map[string]any{"tools": []string{}},
	}}})
	g := startWithResolver(t, d, dns)
	body := func(u string) map[string]any {
		return map[string]any{"tool": "http.get", "input": map[string]any{"url": u, "timeout_s": 3}}
	}

	// Dry runs the policy allows: the old Enforce resolved these.
	var dry []response
	for _, c := range []struct{ key, host string }{
		{agentFull, "dry-full-secretdata." + zone},
		{agentNoExec, "listed." + zone},
	} {
		dry = append(dry, g.do(t, http.MethodPost, "/v1/decisions", g.dep.keys[c.key], body("http://"+c.host+"/")))
	}
	time.Sleep(300 * time.Millisecond)
	if got := dns.asked(zone); len(got) != 0 {
		t.Fatalf("a dry run (no receipt) sent DNS queries: %v", got)
	}
	for _, r := range dry {
		var dr struct {
			Decision struct{ Allow bool }   `json:"decision"`
			Error    *struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal(r.body, &dr); err != nil || r.status != 200 || !dr.Decision.Allow || dr.Error != nil {
			t.Fatalf("dry run: %v %s", err, r)
		}
	}
	// Real calls refused before any lookup: by the policy, by the list.
	if r := g.call(t, g.dep.keys[agentNarrow], body("http://denied-by-policy."+zone+"/")); r.errCode() != "permission_denied" {
		t.Fatalf("denied call: %s", r.response)
	}
	if r := g.call(t, g.dep.keys[agentNoExec], body("http://not-listed."+zone+"/")); r.errCode() != "network_denied" {
		t.Fatalf("unlisted name: %s", r.response)
	}
	time.Sleep(500 * time.Millisecond)
	if got := dns.asked(zone); len(got) != 0 {
		t.Fatalf("the gateway sent DNS queries for names no decision allowed it to resolve: %v", got)
	}

	// Control: an allowed real call does resolve through this server.
	_ = g.call(t, g.dep.keys[agentFull], body("http://control."+zone+"/"))
	deadline := time.Now().Add(5 * time.Second)
	for len(dns.asked("control."+zone)) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if len(dns.asked("control."+zone)) == 0 {
		t.Fatalf("control: the allowed call's lookup never reached the test's DNS server; the test proves nothing")
	}
	if got := dns.asked(zone); len(got) != len(dns.asked("control."+zone)) {
		t.Fatalf("queries besides the control's: %v", got)
	}
}

// TestNoHostPathOracle: through the real gateway, argv[0] and cwd outside
// every grant get the same status, code and message (but for the path)
// whether the host path exists or not, also through a symlink the agent
// planted in its writable grant, in a real call and in a dry run; and the
// time taken does not differ grossly.
func TestNoHostPathOracle(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	missing := "/etc/portcullis-no-such-" + randHex(t, 4)
	for _, l := range []struct{ name, target string }{{"l-exists", "/etc/passwd"}, {"l-missing", missing}, {"d-exists", "/etc"}, {"d-missing", missing + "-dir"}} {
		if err := os.Symlink(l.target, filepath.Join(d.scratch, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		status         int
		code, field    string
		message, model string
	}
	ask := func(key, path string, in map[string]any, dry bool) answer {
		b := map[string]any{"tool": "Exec", "input": in}
		if dry {
			r := g.do(t, http.MethodPost, "/v1/decisions", g.dep.keys[key], b)
			var dr struct {
				Error *struct {
					Code    string         `json:"code"`
					Message string         `json:"message"`
					Details map[string]any `json:"details"`
				} `json:"error"`
			}
			if err := json.Unmarshal(r.body, &dr); err != nil || dr.Error == nil {
				return answer{status: r.status, message: string(r.body)}
			}
			f, _ := dr.Error.Details["field"].(string)
			return answer{r.status, dr.Error.Code, f, dr.Error.Message, strings.ReplaceAll(dr.Error.Message, path, "<P>")}
		}
		r := g.call(t, g.dep.keys[key], b)
		if r.Output.Error == nil {
			return answer{status: r.status, message: string(r.body)}
		}
		f, _ := r.Output.Error.Details["field"].(string)
		return answer{r.status, r.Output.Error.Code, f, r.Output.Error.Message, strings.ReplaceAll(r.Output.Error.Message, path, "<P>")}
	}
	for _, dry := range []bool{false, true} {
		for _, c := range []struct {
			name, key, field string
			exists, missing  string
			in               func(p string) map[string]any
		}{
			{"argv[0], no grant there", agentNarrow, "argv[0]", "/etc/passwd", missing, func(p string) map[string]any { return map[string]any{"argv": []string{p}} }},
			{"argv[0], a directory", agentNarrow, "argv[0]", "/etc", missing, func(p string) map[string]any { return map[string]any{"argv": []string{p}} }},
			{"argv[0], planted link", agentFull, "argv[0]", filepath.Join(d.scratch, "l-exists"), filepath.Join(d.scratch, "l-missing"), func(p string) map[string]any { return map[string]any{"argv": []string{p}} }},
			{"cwd", agentFull, "cwd", "/etc", missing + "-dir", func(p string) map[string]any { return map[string]any{"argv": []string{"/usr/bin/true"}, "cwd": p} }},
			{"cwd, planted link", agentFull, "cwd", filepath.Join(d.scratch, "d-exists"), filepath.Join(d.scratch, "d-missing"), func(p string) map[string]any {
				return map[string]any{"argv": []string{"/usr/bin/true"}, "cwd": p}
			}},
		} {
			a, b := ask(c.key, c.exists, c.in(c.exists), dry), ask(c.key, c.missing, c.in(c.missing), dry)
			if a.code != "fs_denied" || a.field != c.field || a.status != b.status || a.code != b.code || a.field != b.field || a.model != b.model {
				t.Errorf("dry=%v %s: existing and missing host paths answered differently:\n  exists:  %+v\n  missing: %+v", dry, c.name, a, b)
			}
		}
	}

	// Timing: medians of alternated calls for an existing and a missing
	// path stay within generous bounds of each other.
	var te, tm []time.Duration
	for i := 0; i < 12; i++ {
		for _, p := range []string{"/etc/passwd", missing} {
			start := time.Now()
			_ = ask(agentNarrow, p, map[string]any{"argv": []string{p}}, false)
			if p == missing {
				tm = append(tm, time.Since(start))
			} else {
				te = append(te, time.Since(start))
			}
		}
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	me, mm := med(te), med(tm)
	// Both go through the policy and a receipt now; before, a missing
	// path was refused before the policy. Generous: the machine is shared.
	if diff := me - mm; diff > 100*time.Millisecond || diff < -100*time.Millisecond {
		if max(me, mm) > 4*min(me, mm) {
			t.Errorf("timing differs grossly: existing %s, missing %s (medians)", me, mm)
		}
	}
	t.Logf("median answer: existing %s, missing %s", me, mm)
}
