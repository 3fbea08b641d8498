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
	return fillMemFile(f, b)
}
