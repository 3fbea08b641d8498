package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// newMemFile is a memfd holding b, positioned at its start.
func newMemFile(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("rllm-sandbox-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
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
