package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// newTransport is a keep-alive transport sized for conns concurrent
// requests to one host, so no request of a run pays for a new connection
// once the pool is warm.
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// httpPost returns an Op that POSTs body to url with the given headers and
// reads the whole answer. The body bytes are shared by all requests.
func httpPost(client *http.Client, url string, body []byte, header http.Header) Op {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header = header.Clone()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return &StatusError{Code: resp.StatusCode, Body: string(b)}
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return fmt.Errorf("read answer: %w", err)
		}
		return nil
	}
}

// postOnce sends one request and returns the answer's body, for the smoke
// checks that prove each system answers what the benchmark assumes.
func postOnce(ctx context.Context, client *http.Client, url string, body []byte, header http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
