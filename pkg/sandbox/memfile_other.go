//go:build !linux

package sandbox

import "os"

// newMemFile is an unlinked temporary file holding b, positioned at its
// start.
func newMemFile(name string, b []byte) (*os.File, error) {
	f, err := os.CreateTemp("", "rllm-sandbox-"+name+"-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
