package bench

import "strconv"

// A 5×7 bitmap font for the PNG canvas, drawn for this package: printable
// ASCII and the few other characters the figures use. Each glyph is seven
// rows, top first, of five bits, the high bit leftmost, written as seven
// two-digit hex numbers.
const (
	glyphWidth  = 5
	glyphHeight = 7
)

var glyphHex = map[rune]string{
	' ': "00000000000000", '!': "04040404040004", '"': "0a0a0000000000", '#': "0a0a1f0a1f0a0a",
	'$': "040f140e051e04", '%': "18190204081303", '&': "0c12140815120d", '\'': "04040000000000",
	'(': "02040808080402", ')': "08040202020408", '*': "0004150e150400", '+': "0004041f040400",
	',': "000000000c0408", '-': "0000001f000000", '.': "00000000000c0c", '/': "00010204081000",
	'0': "0e11131519110e", '1': "040c040404040e", '2': "0e11010204081f", '3': "1f02040201110e",
	'4': "02060a121f0202", '5': "1f101e0101110e", '6': "0608101e11110e", '7': "1f010204080808",
	'8': "0e11110e11110e", '9': "0e11110f01020c", ':': "000c0c000c0c00", ';': "000c0c000c0408",
	'<': "02040810080402", '=': "00001f001f0000", '>': "08040201020408", '?': "0e110102040004",
	'@': "0e11010d15150e", 'A': "0e1111111f1111", 'B': "1e11111e11111e", 'C': "0e11101010110e",
	'D': "1c12111111121c", 'E': "1f10101e10101f", 'F': "1f10101e101010", 'G': "0e11101711110f",
	'H': "1111111f111111", 'I': "0e04040404040e", 'J': "0702020202120c", 'K': "11121418141211",
	'L': "1010101010101f", 'M': "111b1515111111", 'N': "11111915131111", 'O': "0e11111111110e",
	'P': "1e11111e101010", 'Q': "0e11111115120d", 'R': "1e11111e141211", 'S': "0f10100e01011e",
	'T': "1f040404040404", 'U': "1111111111110e", 'V': "11111111110a04", 'W': "1111111515150a",
	'X': "11110a040a1111", 'Y': "1111110a040404", 'Z': "1f01020408101f", '[': "0e08080808080e",
	'\\': "00100804020100", ']': "0e02020202020e", '^': "040a1100000000", '_': "0000000000001f",
	'`': "08040200000000", 'a': "00000e010f110f", 'b': "1010161911111e", 'c': "00000e1010110e",
	'd': "01010d1311110f", 'e': "00000e111f100e", 'f': "0609081c080808", 'g': "000f11110f010e",
	'h': "10101619111111", 'i': "04000c0404040e", 'j': "0200060202120c", 'k': "10101214181412",
	'l': "0c04040404040e", 'm': "00001a15151111", 'n': "00001619111111", 'o': "00000e1111110e",
	'p': "00001e111e1010", 'q': "00000d130f0101", 'r': "00001619101010", 's': "00000e100e011e",
	't': "08081c08080906", 'u': "0000111111130d", 'v': "00001111110a04", 'w': "0000111115150a",
	'x': "0000110a040a11", 'y': "000011110f010e", 'z': "00001f0204081f", '{': "02040408040402",
	'|': "04040404040404", '}': "08040402040408", '~': "00000815020000",
	'µ': "00001111131d10", '×': "00110a040a1100", '÷': "0004001f000400", '≥': "1008040810001f",
	'≤': "0204080402001f", '→': "0004021f020400", '–': "0000001f000000",
}

// glyphs holds the decoded font; unknownGlyph stands for any other rune.
var (
	glyphs       = decodeGlyphs()
	unknownGlyph = [glyphHeight]uint8{0x1f, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1f}
)

func decodeGlyphs() map[rune][glyphHeight]uint8 {
	out := make(map[rune][glyphHeight]uint8, len(glyphHex))
	for r, hex := range glyphHex {
		var g [glyphHeight]uint8
		if len(hex) != 2*glyphHeight {
			panic("bench: glyph " + strconv.QuoteRune(r) + " has the wrong length")
		}
		for row := range glyphHeight {
			v, err := strconv.ParseUint(hex[2*row:2*row+2], 16, 8)
			if err != nil || v >= 1<<glyphWidth {
				panic("bench: glyph " + strconv.QuoteRune(r) + " has a bad row")
			}
			g[row] = uint8(v)
		}
		out[r] = g
	}
	return out
}

func glyph(r rune) [glyphHeight]uint8 {
	if g, ok := glyphs[r]; ok {
		return g
	}
	return unknownGlyph
}
