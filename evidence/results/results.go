// Package results keeps the full output of tool calls for a while, so an
// agent can read back one of its own earlier results by receipt id
// (read_tool_result): the recovery primitive for an output that was cut or
// dropped from the model's context. The receipt itself keeps only the
// output's digest, as evidence must; this store is a cache beside it, not
// evidence.
//
// Every result is one file, <dir>/<receipt id>.json (0600, the directory
// 0700), written atomically. Before it is written the output passes through
// the evidence redactor (evidence.RedactOutput): secrets that a tool
// printed never reach the disk. A result larger than MaxBytes after
// redaction is kept only as a stub that says so. Results expire after
// Retention and are swept; the directory as a whole is bounded (the oldest
// results give way). A result is returned only to the principal and
// session that made the call; to anyone else it does not exist.
package results

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// Defaults of Options.
const (
	DefaultRetention = 24 * time.Hour
	DefaultMaxBytes  = 1 << 20
	// TotalFactor bounds the directory: MaxTotalBytes defaults to
	// TotalFactor × MaxBytes.
	TotalFactor = 512
)

// ErrNotFound means there is no result for that receipt that the caller
// may read: none was kept, it expired, or it belongs to another principal
// or session. The cases are not told apart, so a caller learns nothing
// about calls that are not its own.
var ErrNotFound = errors.New("results: no such result")

// OmittedTooLarge marks a result whose output was over MaxBytes.
const OmittedTooLarge = "too_large"

// Record is a finished call's result as the pipeline hands it over.
type Record struct {
	ReceiptID   uuid.UUID
	PrincipalID string
	SessionID   string
	Tool        string
	Time        time.Time
	Output      wire.ToolOutput
}

// Stored is a kept result as it is on disk and as Load returns it.
type Stored struct {
	ReceiptID   string    `json:"receipt_id"`
	PrincipalID string    `json:"principal_id"`
	SessionID   string    `json:"session_id"`
	Tool        string    `json:"tool"`
	Time        time.Time `json:"time"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Bytes is the size of the output's JSON after redaction.
	Bytes int `json:"bytes"`
	// Omitted says why Output is absent ("too_large").
	Omitted string `json:"omitted,omitempty"`
	// Output is the redacted ToolOutput.
	Output *json.RawMessage `json:"output"`
}

// Options configure a Store.
type Options struct {
	// Dir holds the result files (created 0700 on first use).
	Dir string
	// Retention is how long a result is kept (default DefaultRetention).
	Retention time.Duration
	// MaxBytes bounds one result's redacted output JSON (default
	// DefaultMaxBytes).
	MaxBytes int64
	// MaxTotalBytes bounds the directory (default TotalFactor × MaxBytes).
	MaxTotalBytes int64
	Logger        *slog.Logger
	Now           func() time.Time
}

type entry struct {
	id    uuid.UUID
	size  int64
	saved time.Time
}

// queueSize bounds the results waiting to be written.
const queueSize = 1024

// Store keeps results. It does no I/O until first used. Save only queues:
// one goroutine redacts and writes, off the calls' path; Load waits for a
// result still queued.
type Store struct {
	opts Options

	mu      sync.Mutex
	ready   bool
	entries map[uuid.UUID]entry
	order   []uuid.UUID // oldest first
	total   int64

	start   sync.Once
	queue   chan queued
	pmu     sync.Mutex
	pending map[uuid.UUID]chan struct{}
	writes  sync.WaitGroup
	dropped atomic.Uint64
}

// New returns a store over opts.Dir.
func New(opts Options) *Store {
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxTotalBytes <= 0 {
		opts.MaxTotalBytes = TotalFactor * opts.MaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{opts: opts, queue: make(chan queued, queueSize), pending: map[uuid.UUID]chan struct{}{}}
}

// Dropped counts results not kept because the write queue was full.
func (s *Store) Dropped() uint64 { return s.dropped.Load() }

// Flush waits until every queued result is written.
func (s *Store) Flush() { s.writes.Wait() }

// Dir is the directory of the result files.
func (s *Store) Dir() string { return s.opts.Dir }

// Retention is how long results are kept.
func (s *Store) Retention() time.Duration { return s.opts.Retention }

// MaxBytes is the bound of one result.
func (s *Store) MaxBytes() int64 { return s.opts.MaxBytes }

func (s *Store) path(id uuid.UUID) string { return filepath.Join(s.opts.Dir, id.String()+".json") }

// init makes the directory (refusing a symlink in its place) and indexes
// what it holds. Called with mu held.
func (s *Store) init() error {
	if s.ready {
		return nil
	}
	if err := os.MkdirAll(s.opts.Dir, 0o700); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	fi, err := os.Lstat(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("results: %s is not a directory", s.opts.Dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(s.opts.Dir, 0o700); err != nil {
			return fmt.Errorf("results: %w", err)
		}
	}
	if err := s.scan(); err != nil {
		return err
	}
	s.ready = true
	return nil
}

// scan rebuilds the index from the directory: another process sharing it
// may have added or removed files. Called with mu held.
func (s *Store) scan() error {
	ents, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	s.entries, s.order, s.total = map[uuid.UUID]entry{}, nil, 0
	now := s.opts.Now()
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > time.Minute {
				_ = os.Remove(filepath.Join(s.opts.Dir, name)) // left by a crash mid-write
			}
			continue
		}
		id, err := uuid.Parse(strings.TrimSuffix(name, ".json"))
		if err != nil || !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		s.entries[id] = entry{id: id, size: fi.Size(), saved: fi.ModTime()}
		s.order = append(s.order, id)
		s.total += fi.Size()
	}
	slices.SortFunc(s.order, func(a, b uuid.UUID) int { return s.entries[a].saved.Compare(s.entries[b].saved) })
	return nil
}

// Save queues a result to keep and returns at once; it is written by the
// store's goroutine. When the queue is full the result is not kept
// (Dropped counts it): results are a convenience, never evidence, and a
// call is never held up for one. Results of calls without a session are
// not kept: read_tool_result is scoped to a session. The record's output
// must not be changed afterwards.
func (s *Store) Save(r Record) error {
	if r.SessionID == "" || r.ReceiptID == uuid.Nil {
		return nil
	}
	s.start.Do(func() { go s.writer() })
	done := make(chan struct{})
	s.pmu.Lock()
	s.pending[r.ReceiptID] = done
	s.pmu.Unlock()
	s.writes.Add(1)
	select {
	case s.queue <- queued{r, done}:
		return nil
	default:
		s.finish(r.ReceiptID, done)
		if n := s.dropped.Add(1); n == 1 || n%1000 == 0 {
			s.opts.Logger.Warn("results: write queue full; results not kept for read_tool_result", "dropped_total", n)
		}
		return errQueueFull
	}
}

var errQueueFull = errors.New("results: write queue full: result not kept")

// queued is a result waiting to be written, and what its readers wait on.
type queued struct {
	r    Record
	done chan struct{}
}

func (s *Store) finish(id uuid.UUID, done chan struct{}) {
	s.pmu.Lock()
	if s.pending[id] == done {
		delete(s.pending, id)
	}
	s.pmu.Unlock()
	close(done)
	s.writes.Done()
}

func (s *Store) writer() {
	for q := range s.queue {
		if err := s.write(q.r); err != nil {
			s.opts.Logger.Warn("results: result not kept for read_tool_result", "receipt_id", q.r.ReceiptID.String(), "err", err.Error())
		}
		s.finish(q.r.ReceiptID, q.done)
	}
}

// write redacts and writes one result.
func (s *Store) write(r Record) error {
	now := s.opts.Now()
	st := Stored{ReceiptID: r.ReceiptID.String(), PrincipalID: r.PrincipalID, SessionID: r.SessionID, Tool: r.Tool,
		Time: r.Time.UTC(), ExpiresAt: now.Add(s.opts.Retention).UTC()}
	out, size, err := redactOutput(r.Output, s.opts.MaxBytes)
	switch {
	case errors.Is(err, errTooLarge):
		st.Omitted, st.Bytes = OmittedTooLarge, size
	case err != nil:
		return err
	default:
		raw := json.RawMessage(out)
		st.Output, st.Bytes = &raw, size
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("results: encode: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.init(); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.opts.Dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("results: write: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("results: write: %w", err)
	}
	if err := os.Rename(f.Name(), s.path(r.ReceiptID)); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("results: write: %w", err)
	}
	if old, ok := s.entries[r.ReceiptID]; ok {
		s.total -= old.size
		s.order = slices.DeleteFunc(s.order, func(id uuid.UUID) bool { return id == r.ReceiptID })
	}
	s.entries[r.ReceiptID] = entry{id: r.ReceiptID, size: int64(len(b)), saved: now}
	s.order = append(s.order, r.ReceiptID)
	s.total += int64(len(b))
	for s.total > s.opts.MaxTotalBytes && len(s.order) > 1 {
		s.removeLocked(s.order[0])
	}
	return nil
}

var errTooLarge = errors.New("results: output over the bound")

// redactOutput is the output's JSON after redaction and its size, or
// errTooLarge (with the size found) when it is over max. The size is
// checked before the redaction too, so a huge output costs no redaction
// work.
func redactOutput(o wire.ToolOutput, max int64) ([]byte, int, error) {
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, 0, fmt.Errorf("results: encode output: %w", err)
	}
	if int64(len(raw)) > max {
		return nil, len(raw), errTooLarge
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return nil, 0, fmt.Errorf("results: decode output: %w", err)
	}
	red, err := json.Marshal(evidence.RedactOutput(generic))
	if err != nil {
		return nil, 0, fmt.Errorf("results: encode output: %w", err)
	}
	if int64(len(red)) > max {
		return nil, len(red), errTooLarge
	}
	return red, len(red), nil
}

// Load returns the result of a receipt when it was made by principal in
// session and has not expired; otherwise ErrNotFound. A result still
// queued is waited for (a few seconds at most).
func (s *Store) Load(receiptID uuid.UUID, principal, session string) (Stored, error) {
	if session == "" {
		return Stored{}, ErrNotFound
	}
	s.pmu.Lock()
	done := s.pending[receiptID]
	s.pmu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	s.mu.Lock()
	err := s.init()
	s.mu.Unlock()
	if err != nil {
		return Stored{}, err
	}
	f, err := os.OpenFile(s.path(receiptID), os.O_RDONLY|noFollow, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Stored{}, ErrNotFound
	}
	if err != nil {
		if fi, lerr := os.Lstat(s.path(receiptID)); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			s.opts.Logger.Warn("results: a symlink sits in place of a result file; not followed", "receipt_id", receiptID.String())
			return Stored{}, ErrNotFound
		}
		return Stored{}, fmt.Errorf("results: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return Stored{}, ErrNotFound
	}
	// A stored result is at most MaxBytes of output plus its envelope.
	b, err := io.ReadAll(io.LimitReader(f, s.opts.MaxBytes+64<<10))
	if err != nil {
		return Stored{}, fmt.Errorf("results: read: %w", err)
	}
	var st Stored
	if err := json.Unmarshal(b, &st); err != nil || st.ReceiptID != receiptID.String() {
		return Stored{}, ErrNotFound
	}
	owner := subtle.ConstantTimeCompare([]byte(st.PrincipalID), []byte(principal)) &
		subtle.ConstantTimeCompare([]byte(st.SessionID), []byte(session))
	if owner != 1 {
		return Stored{}, ErrNotFound
	}
	if !s.opts.Now().Before(st.ExpiresAt) {
		s.mu.Lock()
		s.removeLocked(receiptID)
		s.mu.Unlock()
		return Stored{}, ErrNotFound
	}
	return st, nil
}

// removeLocked deletes one result. Called with mu held.
func (s *Store) removeLocked(id uuid.UUID) {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.opts.Logger.Warn("results: remove", "receipt_id", id.String(), "err", err.Error())
	}
	if e, ok := s.entries[id]; ok {
		s.total -= e.size
		delete(s.entries, id)
		s.order = slices.DeleteFunc(s.order, func(x uuid.UUID) bool { return x == id })
	}
}

// Sweep removes expired results (by the time each file was written) and
// returns how many.
func (s *Store) Sweep() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		if _, err := os.Stat(s.opts.Dir); errors.Is(err, os.ErrNotExist) {
			return 0, nil // nothing kept yet
		}
	}
	if err := s.init(); err != nil {
		return 0, err
	}
	if err := s.scan(); err != nil {
		return 0, err
	}
	cutoff := s.opts.Now().Add(-s.opts.Retention)
	n := 0
	for len(s.order) > 0 && !s.entries[s.order[0]].saved.After(cutoff) {
		s.removeLocked(s.order[0])
		n++
	}
	return n, nil
}

// Run sweeps every minute (or Retention/4, if shorter) until ctx ends.
func (s *Store) Run(ctx context.Context) {
	every := min(time.Minute, max(s.opts.Retention/4, time.Second))
	evidence.Every(ctx, every, func() {
		if n, err := s.Sweep(); err != nil {
			s.opts.Logger.Warn("results: sweep", "err", err.Error())
		} else if n > 0 {
			s.opts.Logger.Debug("results: expired results removed", "count", n)
		}
	})
}
