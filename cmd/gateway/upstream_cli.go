package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// cmdUpstream is `gateway upstream list|approve`: the admin routes of a
// running gateway (GET /v1/upstreams, POST .../approve), so that an
// approval is recorded by the gateway that serves the tool, as the admin
// whose key is used. The key is read from a file, never from argv (which
// other users can read in the process table).
func cmdUpstream(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "approve") {
		return usageErr("upstream list|approve: see gateway help")
	}
	fs := flag.NewFlagSet("upstream "+args[0], flag.ContinueOnError)
	base := fs.String("url", "http://127.0.0.1:8080", "the gateway's base URL")
	keyFile := fs.String("key-file", "", "file holding an admin API key (or JWT)")
	if err := fs.Parse(args[1:]); err != nil {
		return usageErr(err.Error())
	}
	if *keyFile == "" {
		return usageErr("--key-file is required")
	}
	b, err := os.ReadFile(*keyFile)
	if err != nil {
		return fmt.Errorf("reading --key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	method, path, body := http.MethodGet, "/v1/upstreams", []byte(nil)
	if args[0] == "approve" {
		rest := fs.Args()
		if len(rest) != 3 {
			return usageErr("upstream approve [--url URL] --key-file F NAME TOOL SHA256")
		}
		method = http.MethodPost
		path = "/v1/upstreams/" + url.PathEscape(rest[0]) + "/tools/" + url.PathEscape(rest[1]) + "/approve"
		body, _ = json.Marshal(map[string]string{"definition_sha256": rest[2]})
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(*base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return usageErr(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(out))
	}
	_, err = stdout.Write(append(bytes.TrimSpace(out), '\n'))
	return err
}

// usageError is a command line the command cannot run: exit 2.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }
func (usageError) ExitCode() int   { return 2 }

func usageErr(msg string) error { return usageError{msg} }
