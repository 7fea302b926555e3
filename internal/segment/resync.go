package segment

import "io"

// Finding whole frames again after a bad one; see the notes at the top of
// damage.go for how recovery uses it.

// resyncCheckBytesMax bounds the body bytes checksummed in one file while
// looking for the next whole frame after bad ones, so that a segment full
// of frame headers whose bodies were hit costs a fraction of a second
// rather than hours.
const resyncCheckBytesMax = 256 << 20

// resyncWindowBytes is the read-ahead window of the search for the next
// whole frame, which moves one byte at a time.
const resyncWindowBytes = 1 << 20

// fileWindow reads a file for the damaged path of recovery: sequential
// reads come from a read-ahead window, others from a scratch buffer.
type fileWindow struct {
	f       io.ReaderAt
	size    int64
	buf     []byte
	off     int64 // file offset of buf[0]
	scratch []byte
	// checkBudget is what is left of resyncCheckBytesMax for this file.
	checkBudget int64
}

// view returns the file bytes [p, p+n), which must lie inside the file,
// valid until the next call. With ahead, a miss refills the window from p;
// without, a miss is read into scratch and the window stays put.
func (w *fileWindow) view(p int64, n int, ahead bool) ([]byte, error) {
	if p >= w.off && p+int64(n) <= w.off+int64(len(w.buf)) {
		return w.buf[p-w.off:][:n], nil
	}
	if ahead && n <= resyncWindowBytes {
		m := int(min(resyncWindowBytes, w.size-p))
		if cap(w.buf) < m {
			w.buf = make([]byte, m)
		}
		w.buf = w.buf[:m]
		if _, err := w.f.ReadAt(w.buf, p); err != nil {
			w.buf = w.buf[:0]
			return nil, err
		}
		w.off = p
		return w.buf[:n], nil
	}
	if cap(w.scratch) < n {
		w.scratch = make([]byte, n)
	}
	b := w.scratch[:n]
	if _, err := w.f.ReadAt(b, p); err != nil {
		return nil, err
	}
	return b, nil
}

// frameFormat is what the search for the next whole frame needs to know
// about the frames of one kind of file.
type frameFormat struct {
	// bodyLen returns the body length a header claims, if its length
	// word verifies and is within the bounds of its kind.
	bodyLen func(h []byte) (int, bool)
	// whole says whether the body of a frame with header h checks out:
	// checksum and decoding.
	whole func(h, body []byte) bool
}

var segmentFormat = frameFormat{
	bodyLen: func(h []byte) (int, bool) {
		_, n, err := segmentFrameHeader(h)
		return n, err == nil
	},
	whole: func(h, body []byte) bool {
		_, err := checkSegmentFrame(h, body)
		return err == nil
	},
}

var positionsFormat = frameFormat{
	bodyLen: func(h []byte) (int, bool) {
		n, _, err := frameHeader(h, runBodyBytesMin, runBodyBytesMax)
		return n, err == nil
	},
	whole: func(h, body []byte) bool {
		_, err := checkRunFrame(h, body)
		return err == nil
	},
}

// resyncResult says how a search for the next whole frame ended.
type resyncResult int

const (
	resyncFound  resyncResult = iota // a whole frame starts at the offset returned
	resyncNone                       // no whole frame after the bad one
	resyncGaveUp                     // resyncCheckBytesMax ran out first: cannot tell
)

// nextWholeFrame returns the first offset from from on where a whole frame
// of format fm starts. A length word must verify before the body is read,
// so random bytes rarely cost a body checksum.
func nextWholeFrame(w *fileWindow, fm frameFormat, from int64) (int64, resyncResult, error) {
	var h [frameHeaderBytes]byte
	for p := from; p+frameHeaderBytes <= w.size; p++ {
		b, err := w.view(p, frameHeaderBytes, true)
		if err != nil {
			return 0, 0, err
		}
		copy(h[:], b)
		n, ok := fm.bodyLen(h[:])
		if !ok || p+frameHeaderBytes+int64(n) > w.size {
			continue
		}
		if w.checkBudget < int64(n) {
			return 0, resyncGaveUp, nil
		}
		w.checkBudget -= int64(n)
		body, err := w.view(p+frameHeaderBytes, n, false)
		if err != nil {
			return 0, 0, err
		}
		if fm.whole(h[:], body) {
			return p, resyncFound, nil
		}
	}
	return 0, resyncNone, nil
}

// wholeFrameAt checks the frame of format fm at p: it returns where the
// frame ends if it is whole, or ok false.
func wholeFrameAt(w *fileWindow, fm frameFormat, p int64) (end int64, ok bool, err error) {
	if p+frameHeaderBytes > w.size {
		return 0, false, nil
	}
	b, err := w.view(p, frameHeaderBytes, true)
	if err != nil {
		return 0, false, err
	}
	var h [frameHeaderBytes]byte
	copy(h[:], b)
	n, ok := fm.bodyLen(h[:])
	end = p + frameHeaderBytes + int64(n)
	if !ok || end > w.size {
		return 0, false, nil
	}
	body, err := w.view(p+frameHeaderBytes, n, true)
	if err != nil {
		return 0, false, err
	}
	return end, fm.whole(h[:], body), nil
}

// resync returns where the next whole frame of format fm starts after the
// bad one at p. If p's length word verifies, its frame ends where the word
// says (a frame found inside it would lie in its body), and a frame whose
// body runs to or past the end of the file is a torn final one; otherwise
// every offset after p is tried.
func resync(w *fileWindow, fm frameFormat, p int64) (int64, resyncResult, error) {
	from := p + 1
	if p+frameHeaderBytes <= w.size {
		h, err := w.view(p, frameHeaderBytes, true)
		if err != nil {
			return 0, 0, err
		}
		if n, ok := fm.bodyLen(h); ok {
			from = p + frameHeaderBytes + int64(n)
			if from >= w.size {
				return 0, resyncNone, nil
			}
		}
	}
	return nextWholeFrame(w, fm, from)
}
