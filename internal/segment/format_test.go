package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// formatOneFrame is the frame of e as format 1 wrote it: the length word,
// the body's CRC-32C, the body, with nothing checking the length word.
func formatOneFrame(e Entry) []byte {
	body := recordFrame(e)[frameHeaderBytes:]
	f := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	f = binary.LittleEndian.AppendUint32(f, crc32.Checksum(body, castagnoli))
	return append(f, body...)
}

// TestOpenRefusesAnotherFormat opens stores that this version cannot read:
// one written by an augur before format 2 (frames without a checksum of
// their length word, no format file), whose records recovery would take
// for damage and whose last segment it would truncate as a torn tail, and
// one whose format file names another format. Open must say so with
// ErrFormat and leave every file as it was.
func TestOpenRefusesAnotherFormat(t *testing.T) {
	var seg []byte
	for i := range uint64(5) {
		seg = append(seg, formatOneFrame(testEntry(i))...)
	}
	for _, c := range []struct {
		name   string
		format []byte // nil: no format file
	}{
		{"format 1", nil},
		{"unknown format", []byte("augur segment store, format 3\n")},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "00000000000000000000"+segmentSuffix)
			if err := os.WriteFile(path, seg, filePerm); err != nil {
				t.Fatal(err)
			}
			if c.format != nil {
				if err := os.WriteFile(filepath.Join(dir, formatName), c.format, filePerm); err != nil {
					t.Fatal(err)
				}
			}
			before, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Open(quiet(Options{Dir: dir}))
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Open = %v, want ErrFormat", err)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, seg) {
				t.Fatalf("segment after the refusal: %d bytes, %v; want its %d bytes untouched", len(got), err, len(seg))
			}
			after, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before) {
				t.Fatalf("directory holds %d files after the refusal, want the %d it had", len(after), len(before))
			}
		})
	}
}

// TestOpenWritesFormat checks that a new store is marked with the format,
// so the next Open reads it.
func TestOpenWritesFormat(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir})
	appendTest(t, s, 3, 3)
	mustClose(t, s)
	b, err := os.ReadFile(filepath.Join(dir, formatName))
	if err != nil || string(b) != formatLine {
		t.Fatalf("format file = %q, %v; want %q", b, err, formatLine)
	}
	s = mustOpen(t, Options{Dir: dir})
	defer s.Close()
	checkRecords(t, s, 0, 3)
}
