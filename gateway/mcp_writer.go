package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// mcpWriter is the response writer the SDK's handler writes to. It keeps
// the answers this endpoint has always given:
//
//   - A POST the SDK answers as server-sent events is one application/json
//     body when the only event is the response. The answer turns into an
//     SSE stream at the first notification before it (a parked tools/call
//     reporting progress), and only for a client that accepts SSE; for
//     others, notifications are dropped.
//   - A transport refusal the SDK writes as plain text (an ended session, a
//     body too large ...) is a JSON-RPC error with the same status.
//   - Anything else (the GET stream, 202, 204, JSON) passes through.
type mcpWriter struct {
	w      http.ResponseWriter
	header http.Header
	sse    bool // the client accepts text/event-stream
	stream bool // GET: the answer is the session's stream
	// onStream, if set, is called when the GET stream is open: the SDK
	// commits its headers holding the stream, so a notification sent
	// after this call is delivered on it.
	onStream func()

	status    int
	mode      int
	streaming bool // the real response is an SSE stream
	answered  bool // the real response has its body
	buf       bytes.Buffer
}

const (
	mcpPassThrough = iota + 1
	mcpFromSSE
	mcpPlainError
)

func (m *mcpWriter) Header() http.Header { return m.header }

func (m *mcpWriter) WriteHeader(code int) {
	if m.status != 0 {
		return
	}
	m.status = code
	ct := m.header.Get(echo.HeaderContentType)
	switch {
	case code >= 400 && !strings.HasPrefix(ct, echo.MIMEApplicationJSON):
		m.mode = mcpPlainError
	case code == http.StatusOK && strings.HasPrefix(ct, "text/event-stream") && !m.stream:
		m.mode = mcpFromSSE
	default:
		m.mode = mcpPassThrough
		m.commit(code)
		if m.stream && code == http.StatusOK && m.onStream != nil {
			m.onStream()
		}
	}
}

func (m *mcpWriter) Write(b []byte) (int, error) {
	if m.status == 0 {
		m.WriteHeader(http.StatusOK)
	}
	switch m.mode {
	case mcpPlainError:
		if m.buf.Len() < 4096 {
			m.buf.Write(b)
		}
		return len(b), nil
	case mcpFromSSE:
		m.buf.Write(b)
		return len(b), m.events()
	}
	return m.w.Write(b)
}

// Flush flushes what has gone to the client.
func (m *mcpWriter) Flush() {
	if m.status == 0 && m.stream {
		m.WriteHeader(http.StatusOK)
	}
	if m.mode == mcpPassThrough || m.streaming {
		if f, ok := m.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// commit sends the headers the SDK set, with status.
func (m *mcpWriter) commit(status int) {
	h := m.w.Header()
	for k, v := range m.header {
		h[k] = v
	}
	m.w.WriteHeader(status)
}

// events handles each complete SSE event buffered.
func (m *mcpWriter) events() error {
	for {
		data := m.buf.Bytes()
		i := bytes.Index(data, []byte("\n\n"))
		if i < 0 {
			return nil
		}
		event := append([]byte(nil), data[:i+2]...)
		m.buf.Next(i + 2)
		if err := m.event(event); err != nil {
			return err
		}
	}
}

func (m *mcpWriter) event(event []byte) error {
	var payload []byte
	for _, line := range bytes.Split(bytes.TrimRight(event, "\n"), []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			payload = append(payload, bytes.TrimPrefix(d, []byte(" "))...)
		}
	}
	if len(payload) == 0 {
		return nil // a priming or comment event
	}
	var msg struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(payload, &msg)
	isResponse := msg.Method == ""
	switch {
	case m.streaming:
	case isResponse && !m.answered:
		m.header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		m.header.Del("Connection")
		m.commit(http.StatusOK)
		m.answered = true
		_, err := m.w.Write(payload)
		return err
	case !m.sse || m.answered:
		return nil // a client that reads no SSE gets no notifications
	default:
		m.commit(http.StatusOK)
		m.streaming = true
	}
	if _, err := m.w.Write(event); err != nil {
		return err
	}
	m.Flush()
	return nil
}

// finish writes what the SDK's handler left buffered: a plain-text refusal
// as a JSON-RPC error.
func (m *mcpWriter) finish() {
	if m.mode != mcpPlainError {
		return
	}
	msg := strings.TrimSpace(m.buf.String())
	if msg == "" {
		msg = http.StatusText(m.status)
	}
	m.header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	m.header.Set("X-Content-Type-Options", "nosniff")
	m.header.Del("Content-Length")
	m.commit(m.status)
	b, _ := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: rpcInvalidRequest, Message: msg}})
	_, _ = m.w.Write(b)
}
