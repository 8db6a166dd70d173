package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// policyInput is the gateway's policy input document (docs/policies.md),
// built here for OPA: the same facts the gateway derives from the request.
func policyInput(tool, purpose string, args, resolved map[string]any) map[string]any {
	return map[string]any{
		"principal":  map[string]any{"id": benchPrincipal, "roles": []string{"agent"}, "attributes": map[string]any{"team": "bench"}},
		"tool":       tool,
		"purpose":    purpose,
		"args":       args,
		"resolved":   resolved,
		"session_id": "",
		"call_id":    "",
		"time":       time.Now().UTC().Format(time.RFC3339Nano),
	}
}

// execTrueInput is the input of Exec ["/usr/bin/true"].
func execTrueInput(purpose string) map[string]any {
	return policyInput("Exec", purpose,
		map[string]any{"argv": []string{"/usr/bin/true"}},
		map[string]any{"argv0": "/usr/bin/true", "argv0_base": "true", "argv": []string{"/usr/bin/true"}, "cwd": "", "env_names": []string{}})
}

// fsReadInput is the input of fs.read of the bench file.
func (e *benchEnv) fsReadInput() map[string]any {
	facts := map[string]any{"path": e.fsFile, "alias": "", "rel": "", "name": "f.txt", "exists": true, "type": "file", "size": fsFileSize}
	resolved := map[string]any{"paths": []any{facts}, "write": false}
	for k, v := range facts {
		resolved[k] = v
	}
	return policyInput("fs.read", "call", map[string]any{"path": e.fsFile}, resolved)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

var _ = registerScenario("upstream", (*runner).upstreamScenario) // scenarios_upstream.go

// client is an HTTP client with enough keep-alive connections for the
// largest closed-loop client count and the open-loop in-flight cap.
func (r *runner) client() *http.Client {
	return &http.Client{Transport: newTransport(max(r.cfg.maxInflight, r.maxClients())), Timeout: 60 * time.Second}
}

func (r *runner) maxClients() int {
	m := 1
	for _, c := range r.cfg.clients {
		m = max(m, c)
	}
	return m
}

// smoke sends one request and checks the answer with check, so a
// misconfigured system fails loudly instead of benchmarking its refusals.
func smoke(ctx context.Context, c *http.Client, name, url string, body []byte, h http.Header, check func(status int, b []byte) error) error {
	status, b, err := postOnce(ctx, c, url, body, h)
	if err != nil {
		return fmt.Errorf("%s: smoke request: %w", name, err)
	}
	if err := check(status, b); err != nil {
		return fmt.Errorf("%s: smoke answer HTTP %d %s: %w", name, status, truncate(string(b), 600), err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// gatewayDecisionOK checks a POST /v1/decisions answer allows.
func gatewayDecisionOK(status int, b []byte) error {
	var a struct {
		Decision struct {
			Allow bool `json:"allow"`
		} `json:"decision"`
		Error json.RawMessage `json:"error"`
	}
	if status != http.StatusOK {
		return errors.New("want 200")
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if !a.Decision.Allow || len(a.Error) > 0 && string(a.Error) != "null" {
		return errors.New("want an allowed decision without error")
	}
	return nil
}

// opaAllowOK checks an OPA data API answer allows.
func opaAllowOK(status int, b []byte) error {
	var a struct {
		Result struct {
			Allow bool `json:"allow"`
		} `json:"result"`
	}
	if status != http.StatusOK {
		return errors.New("want 200")
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if !a.Result.Allow {
		return errors.New("want result.allow true")
	}
	return nil
}

// toolCallOK checks a POST /v1/tool-calls answer succeeded.
func toolCallOK(status int, b []byte) error {
	var a struct {
		ReceiptID string `json:"receipt_id"`
		Output    struct {
			Success bool `json:"success"`
		} `json:"output"`
	}
	if status != http.StatusOK {
		return errors.New("want 200")
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if !a.Output.Success || a.ReceiptID == "" {
		return errors.New("want output.success and a receipt")
	}
	return nil
}

// decisionScenario: POST /v1/decisions vs OPA's POST /v1/data on the same
// Rego, once with the shipped library and once with a one-rule policy.
func (r *runner) decisionScenario(ctx context.Context) error {
	const scenario = "decision"
	gwBody := []byte(`{"tool":"Exec","input":{"argv":["/usr/bin/true"]}}`)
	opaBody := mustJSON(map[string]any{"input": execTrueInput("dry_run")})
	policies := []struct{ label, bundle string }{
		{"shipped", r.env.shippedBundle},
		{"trivial", r.env.trivialBundle},
	}
	var errs []error
	for _, p := range policies {
		err := r.withServer(ctx, func(ctx context.Context) (*server, error) {
			return r.env.startGateway(ctx, gatewayOptions{name: "decision-" + p.label, backend: "process", bundle: p.bundle})
		}, func(s *server) error {
			c := r.client()
			url := s.baseURL + "/v1/decisions"
			h := r.env.authHeader()
			if err := smoke(ctx, c, s.name, url, gwBody, h, gatewayDecisionOK); err != nil {
				return err
			}
			return r.measure(ctx, scenario, system{
				name: "gateway/" + p.label, unit: "decisions/s", op: httpPost(c, url, gwBody, h),
				pid: s.pid(), cpuScope: "gateway process",
				clients: r.goalClients(), fixedRates: goalRates(p.label),
				note: "POST /v1/decisions, Exec /usr/bin/true (dry run: validate, resolve, decide, enforce; no evidence)",
			})
		})
		errs = append(errs, err)
		err = r.withServer(ctx, func(ctx context.Context) (*server, error) {
			return r.env.startOPA(ctx, "decision-"+p.label, p.bundle, false)
		}, func(s *server) error {
			c := r.client()
			url := s.baseURL + "/v1/data/portcullis/decision"
			if err := smoke(ctx, c, s.name, url, opaBody, jsonHeader, opaAllowOK); err != nil {
				return err
			}
			return r.measure(ctx, scenario, system{
				name: "opa/" + p.label, unit: "decisions/s", op: httpPost(c, url, opaBody, jsonHeader),
				pid: s.pid(), cpuScope: "opa process",
				clients: r.goalClients(), fixedRates: goalRates(p.label),
				note: "POST /v1/data/portcullis/decision with the gateway-shaped input; no decision logs",
			})
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// fsreadScenario: a governed fs.read of a 4 KB file with durable evidence,
// on PostgreSQL and on the embedded store, vs OPA answering the same
// decision with console decision logs written to a file.
func (r *runner) fsreadScenario(ctx context.Context) error {
	const scenario = "fsread"
	gwBody := mustJSON(map[string]any{"tool": "fs.read", "input": map[string]any{"path": r.env.fsFile}})
	var errs []error
	for _, pg := range []bool{true, false} {
		label := "sqlite"
		if pg {
			label = "postgres"
		}
		err := r.withServer(ctx, func(ctx context.Context) (*server, error) {
			return r.env.startGateway(ctx, gatewayOptions{name: "fsread-" + label, postgres: pg, backend: "process", bundle: r.env.shippedBundle})
		}, func(s *server) error {
			c := r.client()
			url := s.baseURL + "/v1/tool-calls"
			h := r.env.authHeader()
			if err := smoke(ctx, c, s.name, url, gwBody, h, toolCallOK); err != nil {
				return err
			}
			scope := "gateway process"
			if pg {
				scope = "gateway process (+ PostgreSQL in its own column)"
			}
			return r.measure(ctx, scenario, system{
				name: "gateway/" + label, unit: "calls/s", op: httpPost(c, url, gwBody, h),
				pid: s.pid(), cpuScope: scope, db: s.dbName,
				note: "POST /v1/tool-calls fs.read 4 KB, shipped policy, decision + outcome durable before the answer",
			})
		})
		errs = append(errs, err)
	}
	if r.cfg.noOPA {
		return errors.Join(errs...)
	}
	opaBody := mustJSON(map[string]any{"input": r.env.fsReadInput()})
	var logPath string
	err := r.withServer(ctx, func(ctx context.Context) (*server, error) {
		s, err := r.env.startOPA(ctx, "fsread-decision-logs", r.env.shippedBundle, true)
		if s != nil {
			logPath = s.logPath
		}
		return s, err
	}, func(s *server) error {
		c := r.client()
		url := s.baseURL + "/v1/data/portcullis/decision"
		if err := smoke(ctx, c, s.name, url, opaBody, jsonHeader, opaAllowOK); err != nil {
			return err
		}
		return r.measure(ctx, scenario, system{
			name: "opa/decision-logs", unit: "decisions/s", op: httpPost(c, url, opaBody, jsonHeader),
			pid: s.pid(), cpuScope: "opa process",
			note: "POST /v1/data, same policy and input; --set decision_logs.console=true, output to a file (not fsynced)",
		})
	})
	errs = append(errs, err)
	if err == nil && logPath != "" {
		if n, err := countLines(logPath, `"msg":"Decision Log"`); err == nil {
			logf("opa decision log lines written: %d", n)
			r.report.Notes = append(r.report.Notes, fmt.Sprintf("fsread: OPA wrote %d decision-log lines to its log file during the run.", n))
		}
	}
	return errors.Join(errs...)
}

func countLines(path, substr string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte(substr)), nil
}

// execScenario: Exec /bin/true through the gateway on the process and
// bwrap backends, vs bare bwrap with the same mounts, vs a plain
// fork/exec. The agent's Exec holds a read-write grant of a project tree
// of projectFiles files in projectDirs directories (issue 17's P3).
func (r *runner) execScenario(ctx context.Context) error {
	const scenario = "exec"
	body := []byte(`{"tool":"Exec","input":{"argv":["/usr/bin/true"]}}`)
	bundle, err := r.env.execBundle()
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	var errs []error
	for _, backend := range r.cfg.execBackends {
		err := r.withServer(ctx, func(ctx context.Context) (*server, error) {
			return r.env.startGateway(ctx, gatewayOptions{name: "exec-" + backend, backend: backend, bundle: bundle})
		}, func(s *server) error {
			c := r.client()
			url := s.baseURL + "/v1/tool-calls"
			h := r.env.authHeader()
			if err := smoke(ctx, c, s.name, url, body, h, toolCallOK); err != nil {
				return err
			}
			return r.measure(ctx, scenario, system{
				name: "gateway/" + backend, unit: "calls/s", op: httpPost(c, url, body, h),
				pid: s.pid(), cpuScope: "gateway process + its children", inflight: r.cfg.execInflight,
				note: fmt.Sprintf("POST /v1/tool-calls Exec /usr/bin/true, shipped policy + rw grant of a %d-file, %d-dir project, embedded store", projectFiles, projectDirs),
			})
		})
		errs = append(errs, err)
	}
	bwrapArgs := bareBwrapArgs(r.env.projectDir)
	if _, err := exec.LookPath("bwrap"); err != nil {
		errs = append(errs, fmt.Errorf("bare bwrap: %w", err))
	} else if out, err := exec.CommandContext(ctx, "bwrap", bwrapArgs...).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("bare bwrap does not work here: %v: %s", err, out))
	} else {
		errs = append(errs, r.measure(ctx, scenario, system{
			name: "bare-bwrap", unit: "runs/s", op: runCommand("bwrap", bwrapArgs...), pid: "self",
			cpuScope: "harness + children", inflight: r.cfg.execInflight,
			note: "bwrap " + strings.Join(bwrapArgs, " "),
		}))
	}
	errs = append(errs, r.measure(ctx, scenario, system{
		name: "fork-exec", unit: "runs/s", op: runCommand("/bin/true"), pid: "self",
		cpuScope: "harness + children", inflight: r.cfg.execInflight,
		note: "os/exec of /bin/true from the harness",
	}))
	return errors.Join(errs...)
}

// runCommand returns an Op that runs argv and waits for it.
func runCommand(name string, args ...string) Op {
	return func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, name, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, truncate(string(out), 200))
		}
		return nil
	}
}

// withServer starts a server, runs fn against it and stops it.
func (r *runner) withServer(ctx context.Context, start func(context.Context) (*server, error), fn func(*server) error) error {
	s, err := start(ctx)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := fn(s); err != nil {
		return err
	}
	select {
	case <-s.done:
		return fmt.Errorf("%s exited during the run (%v); log:\n%s", s.name, s.waitErr, tailFile(s.logPath, 4000))
	default:
	}
	return nil
}
