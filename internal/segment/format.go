package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The file "format" names the on-disk format of the store's other files.
// Format 2 gave every frame header a checksum of its length word
// (frame.go); the stores of format 1, written before it, had none and no
// format file.
// Recovery cannot read a store of another format: it would take every
// frame for damage, and the last segment's for a torn tail to truncate.
// So Open refuses such a store, touching nothing, and writes the file into
// a store it creates.
const (
	formatName = "format"
	formatLine = "augur segment store, format 2\n"
)

// ErrFormat: the directory holds a store of an on-disk format this
// version does not read; nothing in it was changed.
var ErrFormat = errors.New("segment: store in another on-disk format")

// checkFormat checks the format file of dir, writing it if dir holds no
// store yet.
func checkFormat(dir string) error {
	if err := os.Remove(filepath.Join(dir, formatName+".tmp")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s.tmp: %w", formatName, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, formatName))
	switch {
	case err == nil:
		if !bytes.Equal(b, []byte(formatLine)) {
			return fmt.Errorf("%w: its format file says %q; this augur reads %q only", ErrFormat, b, strings.TrimSpace(formatLine))
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read format file: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list store: %w", err)
	}
	for _, ent := range ents {
		if name := ent.Name(); strings.HasSuffix(name, segmentSuffix) || name == positionsName || name == baseName {
			return fmt.Errorf("%w: %s holds %s but no format file, so an augur older than format 2 wrote it, and this augur cannot read it; move the directory away: a storage server started without it copies the shard back from the other replicas", ErrFormat, dir, name)
		}
	}
	if err := writeFileDurably(dir, formatName, []byte(formatLine)); err != nil {
		return fmt.Errorf("write format file: %w", err)
	}
	return nil
}
