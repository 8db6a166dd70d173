package evidence

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// The spool keeps late outcomes (late.go) on disk, so a gateway that dies
// while the store is down does not lose how its calls ended. It is an
// append-only file of length-prefixed, checksummed records:
//
//	magic "PCLLATE1" (8 bytes), then records:
//	length (4 bytes, big endian) | CRC-32C of the payload (4) | payload (JSON)
//
// A payload is either an outcome queued ({"op":"add", ...}: the outcome
// event, whether the call did not run, when it was queued) or one settled
// ({"op":"done","id":...}: recorded, found already recorded, or given up).
// Loading replays the file: the outcomes added and not done are queued
// again. Appends of outcomes are fsynced before Queue returns, grouped
// (one fsync serves every append that waited for it); "done" records are
// not (a lost one only makes the next start check a receipt again).
//
// A crash mid-append leaves a torn last record: loading stops at the first
// record whose length or checksum does not hold and cuts the file there.
// When nothing is queued the file is cut back to its magic; when settled
// records outweigh live ones it is rewritten (temporary file, fsync,
// rename). It is opened O_NOFOLLOW, 0600, and locked (flock) by one
// process: one spool per instance id.

const (
	spoolMagic     = "PCLLATE1"
	spoolHeader    = 8 // length + CRC
	spoolMaxRecord = 1 << 20
	// DefaultSpoolMaxBytes bounds the spool file.
	DefaultSpoolMaxBytes = 64 << 20
)

var spoolCRC = crc32.MakeTable(crc32.Castagnoli)

// ErrSpoolLocked means another process holds the spool: two gateways were
// started with the same instance id on one data directory.
var ErrSpoolLocked = errors.New("evidence: late outcome spool is in use by another process (two gateways with one instance_id?)")

// spoolRecord is one record's payload.
type spoolRecord struct {
	Op         string        `json:"op"` // "add" or "done"
	ID         uuid.UUID     `json:"id"`
	ReceiptID  uuid.UUID     `json:"receipt_id,omitzero"`
	Time       time.Time     `json:"time,omitzero"`
	InstanceID string        `json:"instance_id,omitempty"`
	Outcome    *wire.Outcome `json:"outcome,omitempty"`
	NotRun     bool          `json:"not_run,omitempty"`
	Queued     time.Time     `json:"queued,omitzero"`
}

func addRecord(it lateItem) spoolRecord {
	e := it.event
	return spoolRecord{Op: "add", ID: e.ID, ReceiptID: e.ReceiptID, Time: e.Time, InstanceID: e.InstanceID,
		Outcome: e.Outcome, NotRun: it.notRun, Queued: it.queued}
}

func (r spoolRecord) item() (lateItem, error) {
	if r.ID == uuid.Nil || r.ReceiptID == uuid.Nil || r.Outcome == nil || r.Outcome.Status == "" {
		return lateItem{}, errors.New("incomplete outcome")
	}
	return lateItem{
		event:  Event{ID: r.ID, ReceiptID: r.ReceiptID, Kind: KindOutcome, Time: r.Time, InstanceID: r.InstanceID, Outcome: r.Outcome},
		notRun: r.NotRun, queued: r.Queued,
	}, nil
}

func encodeRecord(r spoolRecord) ([]byte, error) {
	p, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(p) > spoolMaxRecord {
		return nil, fmt.Errorf("record of %d bytes", len(p))
	}
	b := make([]byte, spoolHeader, spoolHeader+len(p))
	binary.BigEndian.PutUint32(b, uint32(len(p)))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(p, spoolCRC))
	return append(b, p...), nil
}

// spool is the open file.
type spool struct {
	path   string
	max    int64
	unlock func()

	mu      sync.Mutex // the file, size, written
	f       *os.File
	size    int64
	written uint64 // appends so far (generation)

	syncMu sync.Mutex // one fsync at a time
	synced uint64     // appends covered by the last fsync
}

// openSpool opens (creating) and locks the spool and returns the live
// outcomes it holds, oldest first, and a note of what was discarded.
func openSpool(path string, maxBytes int64) (*spool, []lateItem, string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, "", fmt.Errorf("evidence: spool directory: %w", err)
	}
	f, err := openNoFollow(path)
	if err != nil {
		return nil, nil, "", fmt.Errorf("evidence: open spool %s: %w", path, err)
	}
	unlock, err := lockSpool(f)
	if err != nil {
		f.Close()
		return nil, nil, "", err
	}
	s := &spool{path: path, max: maxBytes, f: f, unlock: unlock}
	fail := func(err error) (*spool, []lateItem, string, error) {
		unlock()
		f.Close()
		return nil, nil, "", err
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("evidence: spool %s: %w", path, err))
	}
	if !fi.Mode().IsRegular() {
		return fail(fmt.Errorf("evidence: spool %s is not a regular file", path))
	}
	if fi.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			return fail(fmt.Errorf("evidence: spool %s: %w", path, err))
		}
	}
	items, good, note, err := readSpool(f)
	if err != nil {
		return fail(fmt.Errorf("evidence: read spool %s: %w", path, err))
	}
	if good < int64(len(spoolMagic)) {
		// New, or torn before its magic was whole: start it.
		if err := f.Truncate(0); err != nil {
			return fail(fmt.Errorf("evidence: spool %s: %w", path, err))
		}
		if _, err := f.WriteAt([]byte(spoolMagic), 0); err != nil {
			return fail(fmt.Errorf("evidence: spool %s: %w", path, err))
		}
		good = int64(len(spoolMagic))
	} else if good < fi.Size() {
		if err := f.Truncate(good); err != nil {
			return fail(fmt.Errorf("evidence: spool %s: cut torn tail: %w", path, err))
		}
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("evidence: spool %s: %w", path, err))
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		return fail(fmt.Errorf("evidence: spool %s: %w", path, err))
	}
	s.size = good
	return s, items, note, nil
}

// readSpool replays the file from its start. good is the offset after the
// last whole record (0 when even the magic is not whole). A file whose
// magic is wrong is refused: it is not a spool.
func readSpool(f *os.File) (items []lateItem, good int64, note string, err error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, "", err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	magic := make([]byte, len(spoolMagic))
	n, err := io.ReadFull(r, magic)
	if n == 0 && errors.Is(err, io.EOF) {
		return nil, 0, "", nil
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) && bytes.HasPrefix([]byte(spoolMagic), magic[:n]) {
			return nil, 0, "torn magic", nil
		}
		return nil, 0, "", err
	}
	if string(magic) != spoolMagic {
		return nil, 0, "", errors.New("not a late outcome spool (bad magic)")
	}
	good = int64(len(spoolMagic))
	live := map[uuid.UUID]int{}
	var order []lateItem
	head := make([]byte, spoolHeader)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				note = fmt.Sprintf("torn record header at byte %d discarded", good)
				break
			}
			return nil, 0, "", err
		}
		size := binary.BigEndian.Uint32(head)
		if size == 0 || size > spoolMaxRecord {
			note = fmt.Sprintf("bad record length %d at byte %d: the rest was discarded", size, good)
			break
		}
		p := make([]byte, size)
		if _, err := io.ReadFull(r, p); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				note = fmt.Sprintf("torn record at byte %d discarded", good)
				break
			}
			return nil, 0, "", err
		}
		if crc32.Checksum(p, spoolCRC) != binary.BigEndian.Uint32(head[4:]) {
			note = fmt.Sprintf("record at byte %d fails its checksum: it and the rest were discarded", good)
			break
		}
		var rec spoolRecord
		if err := json.Unmarshal(p, &rec); err != nil {
			note = fmt.Sprintf("record at byte %d does not decode: it and the rest were discarded", good)
			break
		}
		good += int64(spoolHeader) + int64(size)
		switch rec.Op {
		case "add":
			it, err := rec.item()
			if err != nil {
				continue
			}
			if i, ok := live[rec.ID]; ok {
				order[i] = it
				continue
			}
			live[rec.ID] = len(order)
			order = append(order, it)
		case "done":
			if i, ok := live[rec.ID]; ok {
				order[i].event.ID = uuid.Nil // settled
				delete(live, rec.ID)
			}
		}
	}
	for _, it := range order {
		if it.event.ID != uuid.Nil {
			items = append(items, it)
		}
	}
	return items, good, note, nil
}

// errSpoolFull means the append would pass the spool's bound.
var errSpoolFull = errors.New("evidence: late outcome spool is full")

// append writes records; when durable is set it returns only after an
// fsync covers them.
func (s *spool) append(recs []spoolRecord, durable bool) error {
	var buf []byte
	for _, r := range recs {
		b, err := encodeRecord(r)
		if err != nil {
			return fmt.Errorf("evidence: spool record: %w", err)
		}
		buf = append(buf, b...)
	}
	s.mu.Lock()
	if s.f == nil {
		s.mu.Unlock()
		return errors.New("evidence: spool closed")
	}
	if durable && s.size+int64(len(buf)) > s.max {
		s.mu.Unlock()
		return errSpoolFull
	}
	n, err := s.f.Write(buf)
	s.size += int64(n)
	s.written++
	gen := s.written
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("evidence: spool write: %w", err)
	}
	if !durable {
		return nil
	}
	return s.syncTo(gen)
}

// syncTo returns once an fsync has covered append generation gen: the
// first waiter syncs for everyone queued behind it (group fsync).
func (s *spool) syncTo(gen uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= gen {
		return nil
	}
	for try := 0; ; try++ {
		s.mu.Lock()
		target, f := s.written, s.f
		s.mu.Unlock()
		if f == nil {
			return errors.New("evidence: spool closed")
		}
		err := f.Sync()
		if errors.Is(err, os.ErrClosed) && try == 0 {
			// A rewrite replaced the file meanwhile (it fsynced what it
			// copied, this record included): sync the new one.
			continue
		}
		if err != nil {
			return fmt.Errorf("evidence: spool fsync: %w", err)
		}
		s.synced = target
		return nil
	}
}

// rewrite replaces the file with the magic and the add records of live,
// in order, as many as fit the bound (temporary file, fsync, rename,
// directory fsync), or, with none, cuts it back to its magic. It returns
// the ids written.
func (s *spool) rewrite(live []lateItem) (map[uuid.UUID]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, errors.New("evidence: spool closed")
	}
	written := map[uuid.UUID]bool{}
	if len(live) == 0 {
		if err := s.f.Truncate(int64(len(spoolMagic))); err != nil {
			return nil, fmt.Errorf("evidence: spool truncate: %w", err)
		}
		if _, err := s.f.Seek(int64(len(spoolMagic)), io.SeekStart); err != nil {
			return nil, fmt.Errorf("evidence: spool seek: %w", err)
		}
		s.size = int64(len(spoolMagic))
		return written, s.f.Sync()
	}
	buf := []byte(spoolMagic)
	for _, it := range live {
		b, err := encodeRecord(addRecord(it))
		if err != nil {
			return nil, fmt.Errorf("evidence: spool record: %w", err)
		}
		if int64(len(buf)+len(b)) > s.max {
			break
		}
		buf = append(buf, b...)
		written[it.event.ID] = true
	}
	tmp := s.path + ".tmp"
	_ = os.Remove(tmp)
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("evidence: spool rewrite: %w", err)
	}
	if _, err := nf.Write(buf); err != nil {
		nf.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("evidence: spool rewrite: %w", err)
	}
	if err := nf.Sync(); err != nil {
		nf.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("evidence: spool rewrite: %w", err)
	}
	// The new file takes the lock before it replaces the old one, so no
	// other process can take a spool that is about to be live.
	unlock, err := lockSpool(nf)
	if err != nil {
		nf.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		unlock()
		nf.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("evidence: spool rewrite: %w", err)
	}
	syncDir(filepath.Dir(s.path))
	s.unlock()
	s.f.Close()
	s.f, s.unlock, s.size = nf, unlock, int64(len(buf))
	return written, nil
}

func (s *spool) bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

func (s *spool) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Sync()
	s.unlock()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
