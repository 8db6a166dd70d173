package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// upstreamCmd is `gateway upstream list|approve`: the admin routes of a
// running gateway (GET /v1/upstreams, POST .../approve), so that an
// approval is recorded by the gateway that serves the tool, as the admin
// whose key is used. The key is read from a file, never from argv (which
// other users can read in the process table).
func upstreamCmd() *cobra.Command {
	type target struct{ base, keyFile *string }
	flags := func(c *cobra.Command) target {
		return target{
			base:    c.Flags().String("url", "http://127.0.0.1:8080", "the gateway's base URL"),
			keyFile: c.Flags().String("key-file", "", "file holding an admin API key or JWT (required)"),
		}
	}
	list := &cobra.Command{Use: "list --key-file F [--url URL]", Short: "upstream MCP servers, their tools and digests (admin)", Args: noArgs}
	lt := flags(list)
	list.RunE = func(c *cobra.Command, _ []string) error {
		if err := required(c.Flags(), "key-file"); err != nil {
			return err
		}
		return upstreamRequest(c.Context(), *lt.base, *lt.keyFile, http.MethodGet, "/v1/upstreams", nil, c.OutOrStdout())
	}
	approve := &cobra.Command{Use: "approve --key-file F [--url URL] NAME TOOL SHA256", Short: "approve a quarantined tool's definition (admin)", Args: exactArgs(3)}
	at := flags(approve)
	approve.RunE = func(c *cobra.Command, args []string) error {
		if err := required(c.Flags(), "key-file"); err != nil {
			return err
		}
		body, _ := json.Marshal(map[string]string{"definition_sha256": args[2]})
		path := "/v1/upstreams/" + url.PathEscape(args[0]) + "/tools/" + url.PathEscape(args[1]) + "/approve"
		return upstreamRequest(c.Context(), *at.base, *at.keyFile, http.MethodPost, path, body, c.OutOrStdout())
	}
	return group("upstream", "governed upstream MCP servers of a running gateway", list, approve)
}

// upstreamRequest sends one admin request to a running gateway and prints
// its JSON answer.
func upstreamRequest(ctx context.Context, base, keyFile, method, path string, body []byte, stdout io.Writer) error {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("reading --key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return usageErrorf("--url: %v", err)
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
