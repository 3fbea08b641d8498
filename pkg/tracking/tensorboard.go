package tracking

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rllm-org/rllm-go/internal/atomicfile"
)

// TensorBoardDir is the directory of the run's event files.
const TensorBoardDir = "tensorboard"

// Field numbers of tensorboard/compat/proto/event.proto and summary.proto.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary
	eventSessionLog  = 7 // SessionLog

	summaryValue      = 1 // repeated Value
	valueTag          = 1 // string
	valueSimpleValue  = 2 // float
	sessionLogStatus  = 1 // enum SessionStatus
	sessionLogStart   = 1 // SessionStatus START
	eventsFileVersion = "brain.Event:2"
)

// tbSink writes TensorBoard event files: TFRecord records of Event
// protos, the first one naming the file version, then one scalar per key
// and step.
type tbSink struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	now func() float64
	err error
	buf []byte
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's checksum: CRC-32C, rotated right by 15 bits
// plus a constant.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// openTensorBoard starts a new event file in <dir>/tensorboard. A resumed
// run's file begins with a SessionLog START at the first step it redoes:
// TensorBoard then drops what earlier files hold from that step on, so
// redone steps replace the old ones.
func openTensorBoard(spec Spec, resumedAt int) (*tbSink, error) {
	dir := filepath.Join(spec.Dir, TensorBoardDir)
	if err := os.MkdirAll(dir, atomicfile.DirMode); err != nil {
		return nil, err
	}
	start := spec.Now()
	var f *os.File
	for n := 0; ; n++ {
		name := fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d", start.Unix(), spec.Hostname, spec.PID, n)
		var err error
		f, err = os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, atomicfile.FileMode)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || n > 1000 {
			return nil, err
		}
	}
	s := &tbSink{f: f, w: bufio.NewWriter(f), now: func() float64 { return float64(spec.Now().UnixNano()) / 1e9 }}
	ev := s.event(0)
	ev = protowire.AppendTag(ev, eventFileVersion, protowire.BytesType)
	ev = protowire.AppendString(ev, eventsFileVersion)
	s.record(ev)
	if resumedAt >= 0 {
		ev := s.event(int64(resumedAt + 1))
		var sl []byte
		sl = protowire.AppendTag(sl, sessionLogStatus, protowire.VarintType)
		sl = protowire.AppendVarint(sl, sessionLogStart)
		ev = protowire.AppendTag(ev, eventSessionLog, protowire.BytesType)
		ev = protowire.AppendBytes(ev, sl)
		s.record(ev)
	}
	s.flush()
	if s.err != nil {
		f.Close()
		return nil, s.err
	}
	return s, nil
}

// event begins an Event with its wall time and step.
func (s *tbSink) event(step int64) []byte {
	b := protowire.AppendTag(s.buf[:0], eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(s.now()))
	if step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	return b
}

// record writes one TFRecord: length, its masked CRC, data, its masked CRC.
func (s *tbSink) record(data []byte) {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], maskedCRC(data))
	for _, b := range [][]byte{hdr[:], data, tail[:]} {
		if _, err := s.w.Write(b); err != nil && s.err == nil {
			s.err = err
		}
	}
	s.buf = data[:0]
}

func (s *tbSink) flush() {
	if err := s.w.Flush(); err != nil && s.err == nil {
		s.err = err
	}
}

func (s *tbSink) Name() string { return TensorBoard }

// Log writes one scalar event per metric (keys in order). Non-finite
// values are written as they are: a float holds NaN and ±Inf, and
// TensorBoard shows them.
func (s *tbSink) Log(r Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		var val []byte
		val = protowire.AppendTag(val, valueTag, protowire.BytesType)
		val = protowire.AppendString(val, k)
		val = protowire.AppendTag(val, valueSimpleValue, protowire.Fixed32Type)
		val = protowire.AppendFixed32(val, math.Float32bits(float32(r.Metrics[k])))
		var sum []byte
		sum = protowire.AppendTag(sum, summaryValue, protowire.BytesType)
		sum = protowire.AppendBytes(sum, val)
		ev := s.event(int64(r.Step))
		ev = protowire.AppendTag(ev, eventSummary, protowire.BytesType)
		ev = protowire.AppendBytes(ev, sum)
		s.record(ev)
	}
	s.flush()
}

func (s *tbSink) Event(Event) {}

func (s *tbSink) Close(context.Context, Summary) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	s.flush()
	err := errors.Join(s.err, s.f.Close())
	s.f = nil
	return err
}
