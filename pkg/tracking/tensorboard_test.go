package tracking

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The reader below is written from the formats' specifications, not from
// the writer: TFRecord framing as tensorboard/summary/writer/
// record_writer.py describes it, and the Event, Summary and SessionLog
// messages of tensorboard/compat/proto/event.proto and summary.proto,
// declared here as descriptors and decoded by the protobuf library.

func eventDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	typ := func(k descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto_Type {
		return k.Enum()
	}
	field := func(name string, n int32, l *descriptorpb.FieldDescriptorProto_Label, k descriptorpb.FieldDescriptorProto_Type, msg string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: l, Type: typ(k), JsonName: proto.String(name)}
		if msg != "" {
			f.TypeName = proto.String(msg)
		}
		return f
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("tb_event_test.proto"), Package: proto.String("tensorflow"), Syntax: proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("SessionStatus"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("STATUS_UNSPECIFIED"), Number: proto.Int32(0)}, {Name: proto.String("START"), Number: proto.Int32(1)},
				{Name: proto.String("STOP"), Number: proto.Int32(2)}, {Name: proto.String("CHECKPOINT"), Number: proto.Int32(3)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Value"), Field: []*descriptorpb.FieldDescriptorProto{
				field("tag", 1, opt, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
				field("simple_value", 2, opt, descriptorpb.FieldDescriptorProto_TYPE_FLOAT, ""),
			}},
			{Name: proto.String("Summary"), Field: []*descriptorpb.FieldDescriptorProto{
				field("value", 1, rep, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".tensorflow.Value"),
			}},
			{Name: proto.String("SessionLog"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("status"), Number: proto.Int32(1), Label: opt, Type: typ(descriptorpb.FieldDescriptorProto_TYPE_ENUM), TypeName: proto.String(".tensorflow.SessionStatus")},
				field("checkpoint_path", 2, opt, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
				field("msg", 3, opt, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
			}},
			{Name: proto.String("Event"), Field: []*descriptorpb.FieldDescriptorProto{
				field("wall_time", 1, opt, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, ""),
				field("step", 2, opt, descriptorpb.FieldDescriptorProto_TYPE_INT64, ""),
				field("file_version", 3, opt, descriptorpb.FieldDescriptorProto_TYPE_STRING, ""),
				field("graph_def", 4, opt, descriptorpb.FieldDescriptorProto_TYPE_BYTES, ""),
				field("summary", 5, opt, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".tensorflow.Summary"),
				field("session_log", 7, opt, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".tensorflow.SessionLog"),
			}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("Event")
}

// readRecords reads a TFRecord file: for each record a uint64 length, the
// masked CRC-32C of those 8 bytes, the data and its masked CRC-32C, all
// little-endian; it fails on any checksum that does not match.
func readRecords(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table := crc32.MakeTable(crc32.Castagnoli)
	mask := func(b []byte) uint32 {
		c := crc32.Checksum(b, table)
		return ((c >> 15) | (c << 17)) + 0xa282ead8
	}
	var out [][]byte
	for {
		var hdr [12]byte
		if _, err := io.ReadFull(f, hdr[:]); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("record %d header: %v", len(out), err)
		}
		if binary.LittleEndian.Uint32(hdr[8:]) != mask(hdr[:8]) {
			t.Fatalf("record %d: length checksum", len(out))
		}
		data := make([]byte, binary.LittleEndian.Uint64(hdr[:8]))
		var crc [4]byte
		if _, err := io.ReadFull(f, data); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(f, crc[:]); err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint32(crc[:]) != mask(data) {
			t.Fatalf("record %d: data checksum", len(out))
		}
		out = append(out, data)
	}
}

type tbScalar struct {
	step int64
	tag  string
	v    float32
}

type tbFile struct {
	version   string
	started   int64 // a SessionLog START's step, -1 when none
	scalars   []tbScalar
	wallTimes []float64
}

func readEvents(t *testing.T, path string) tbFile {
	desc := eventDescriptor(t)
	fields := desc.Fields()
	out := tbFile{started: -1}
	for i, rec := range readRecords(t, path) {
		ev := dynamicpb.NewMessage(desc)
		if err := proto.Unmarshal(rec, ev); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		wall := ev.Get(fields.ByName("wall_time")).Float()
		step := ev.Get(fields.ByName("step")).Int()
		out.wallTimes = append(out.wallTimes, wall)
		if i == 0 {
			out.version = ev.Get(fields.ByName("file_version")).String()
			continue
		}
		if ev.Has(fields.ByName("session_log")) {
			sl := ev.Get(fields.ByName("session_log")).Message()
			if sl.Get(sl.Descriptor().Fields().ByName("status")).Enum() == 1 {
				out.started = step
			}
			continue
		}
		sum := ev.Get(fields.ByName("summary")).Message()
		vals := sum.Get(sum.Descriptor().Fields().ByName("value")).List()
		for j := range vals.Len() {
			v := vals.Get(j).Message()
			vf := v.Descriptor().Fields()
			out.scalars = append(out.scalars, tbScalar{step, v.Get(vf.ByName("tag")).String(), float32(v.Get(vf.ByName("simple_value")).Float())})
		}
	}
	return out
}

func TestTensorBoardReadBack(t *testing.T) {
	dir := t.TempDir()
	spec, _, _ := testSpec(t, dir, TensorBoard)
	spec.Hostname, spec.PID = "box", 42
	set, err := openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	rs := rows(1, 3)
	rs[2].Metrics["actor/entropy"] = math.NaN()
	logAll(set, rs)
	closeSet(t, set, Finished)

	// The resumed run writes a second file that starts at step 3.
	spec.ResumedAt = 2
	set, err = openReady(spec)
	if err != nil {
		t.Fatal(err)
	}
	logAll(set, rows(3, 4))
	closeSet(t, set, Finished)

	files, _ := filepath.Glob(filepath.Join(dir, TensorBoardDir, "events.out.tfevents.*"))
	slices.Sort(files)
	if len(files) != 2 {
		t.Fatalf("event files %v", files)
	}
	for _, f := range files {
		base := filepath.Base(f)
		if !strings.HasPrefix(base, "events.out.tfevents.1796126400.box.42.") {
			t.Errorf("file name %s", base)
		}
	}
	first := readEvents(t, files[0])
	if first.version != "brain.Event:2" || first.started != -1 {
		t.Errorf("first file: version %q, start %d", first.version, first.started)
	}
	want := []tbScalar{{1, "critic/score/mean", 0.1}, {1, "val/pass@1", 0.5}, {2, "critic/score/mean", 0.2}, {2, "val/pass@1", 0.5}, {3, "actor/entropy", float32(math.NaN())}, {3, "critic/score/mean", 0.3}, {3, "val/pass@1", 0.5}}
	if len(first.scalars) != len(want) {
		t.Fatalf("scalars %v", first.scalars)
	}
	for i, s := range first.scalars {
		w := want[i]
		if s.step != w.step || s.tag != w.tag || !(s.v == w.v || math.IsNaN(float64(s.v)) && math.IsNaN(float64(w.v))) {
			t.Errorf("scalar %d = %v, want %v", i, s, w)
		}
	}
	if first.wallTimes[0] != 1796126400 {
		t.Errorf("wall time %v", first.wallTimes[0])
	}
	second := readEvents(t, files[1])
	if second.version != "brain.Event:2" || second.started != 3 || len(second.scalars) != 4 || second.scalars[0].step != 3 {
		t.Errorf("second file: %+v", second)
	}
}
