package sandbox

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
)

// FuzzFirstFile: whatever the daemon sends as an archive, reading a file
// from it returns at most max bytes, or an error, and never panics.
func FuzzFirstFile(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "reward.txt", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("1\n"))
	tw.Close()
	f.Add(buf.Bytes(), int64(1))
	f.Add([]byte("not a tar"), int64(10))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, b []byte, max int64) {
		if max < 0 {
			max = -max
		}
		data, _, err := firstFile(bytes.NewReader(b), max)
		if err == nil && int64(len(data)) > max {
			t.Fatalf("%d bytes past max %d", len(data), max)
		}
	})
}

// FuzzReadBuildLog: any stream from the build API gives a bounded log
// tail and never panics; an error message in it is reported.
func FuzzReadBuildLog(f *testing.F) {
	f.Add(`{"stream":"Step 1/2 : FROM x\n"}{"stream":"ok\n"}`)
	f.Add(`{"stream":"Step 2/2 : RUN exit 3\n"}{"errorDetail":{"code":3,"message":"The command '/bin/sh -c exit 3' returned a non-zero code: 3"},"error":"The command '/bin/sh -c exit 3' returned a non-zero code: 3"}`)
	f.Add(`{"error":""}`)
	f.Add(`garbage`)
	f.Fuzz(func(t *testing.T, s string) {
		tail, failed, err := readBuildLog(strings.NewReader(s))
		if strings.Count(tail, "\n") >= buildLogTail {
			t.Fatalf("tail of %d lines", strings.Count(tail, "\n")+1)
		}
		if failed != "" && err != nil {
			t.Fatalf("both a build error %q and a stream error %v", failed, err)
		}
	})
}

// TestReadBuildLog: the daemon's stream of a failed build gives its
// message and the log's end.
func TestReadBuildLog(t *testing.T) {
	tail, failed, err := readBuildLog(strings.NewReader(`{"stream":"Step 1/2 : FROM base\n"}{"stream":" ---\u003e 64f7eac06edd\n"}{"stream":"Step 2/2 : RUN make\n"}{"stream":"make: *** No rule to make target\n"}{"errorDetail":{"code":2,"message":"The command '/bin/sh -c make' returned a non-zero code: 2"},"error":"The command '/bin/sh -c make' returned a non-zero code: 2"}`))
	if err != nil || failed != "The command '/bin/sh -c make' returned a non-zero code: 2" || !strings.HasSuffix(tail, "make: *** No rule to make target") {
		t.Fatalf("tail %q failed %q err %v", tail, failed, err)
	}
	if _, failed, err := readBuildLog(strings.NewReader(`{"stream":"done\n"}`)); err != nil || failed != "" {
		t.Fatalf("a good build: %q %v", failed, err)
	}
	if _, _, err := readBuildLog(strings.NewReader(`<html>`)); err == nil {
		t.Fatal("a stream that is not JSON was read as a log")
	}
}
