package sandbox

import "os"

// fillMemFile writes b to f, a fresh file from newMemFile, and rewinds it
// for the child to read; on failure it closes f.
func fillMemFile(f *os.File, b []byte) (*os.File, error) {
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
