package bench

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
)

// pngScale is how many pixels a point is in a PNG; text is drawn with the
// bitmap font of font.go, one font pixel being pngScale pixels.
const pngScale = 2

// pngCanvas rasterizes onto an RGBA image, without anti-aliasing.
type pngCanvas struct{ img *image.RGBA }

func writePNG(w io.Writer, f *figure) error {
	width, height := f.size()
	img := image.NewRGBA(image.Rect(0, 0, int(width*pngScale), int(height*pngScale)))
	c := &pngCanvas{img: img}
	c.fill(0, 0, img.Rect.Dx(), img.Rect.Dy(), white)
	f.draw(c)
	// A figure is mostly flat colour: the fastest compression is nearly
	// as small as the best.
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	return enc.Encode(w, img)
}

// fill paints the pixel rectangle [x0, x1) × [y0, y1), clipped: the first
// row pixel by pixel, the others as copies of it.
func (c *pngCanvas) fill(x0, y0, x1, y1 int, col color.RGBA) {
	b := c.img.Bounds()
	x0, y0 = max(x0, b.Min.X), max(y0, b.Min.Y)
	x1, y1 = min(x1, b.Max.X), min(y1, b.Max.Y)
	if x0 >= x1 || y0 >= y1 {
		return
	}
	first := c.img.Pix[c.img.PixOffset(x0, y0) : c.img.PixOffset(x1-1, y0)+4]
	for i := 0; i < len(first); i += 4 {
		first[0+i], first[1+i], first[2+i], first[3+i] = col.R, col.G, col.B, col.A
	}
	for y := y0 + 1; y < y1; y++ {
		copy(c.img.Pix[c.img.PixOffset(x0, y):], first)
	}
}

func (c *pngCanvas) line(x1, y1, x2, y2 float64, col color.RGBA, width float64, dashed bool) {
	const dashOn, dashPeriod = 4.0, 7.0 // points
	length := math.Hypot(x2-x1, y2-y1)
	half := max(width*pngScale/2, 0.5)
	steps := int(length*pngScale) + 1
	for i := 0; i <= steps; i++ {
		t := float64(i) / float64(steps)
		if dashed && math.Mod(t*length, dashPeriod) >= dashOn {
			continue
		}
		x := (x1 + (x2-x1)*t) * pngScale
		y := (y1 + (y2-y1)*t) * pngScale
		c.fill(int(math.Round(x-half)), int(math.Round(y-half)), int(math.Round(x+half)), int(math.Round(y+half)), col)
	}
}

func (c *pngCanvas) rect(x, y, w, h float64, col color.RGBA) {
	c.fill(int(math.Round(x*pngScale)), int(math.Round(y*pngScale)),
		int(math.Round((x+w)*pngScale)), int(math.Round((y+h)*pngScale)), col)
}

func (c *pngCanvas) dot(x, y, r float64, col color.RGBA) {
	cx, cy, rp := x*pngScale, y*pngScale, r*pngScale
	for py := int(cy - rp); py <= int(cy+rp); py++ {
		for px := int(cx - rp); px <= int(cx+rp); px++ {
			if math.Hypot(float64(px)+0.5-cx, float64(py)+0.5-cy) <= rp {
				c.fill(px, py, px+1, py+1, col)
			}
		}
	}
}

func (c *pngCanvas) text(x, y float64, s string, col color.RGBA, a anchor, vertical bool) {
	const s1 = pngScale
	runes := []rune(s)
	if len(runes) == 0 {
		return
	}
	// Text width in font pixels: glyphWidth columns plus one of spacing
	// each, without the last spacing.
	w := len(runes)*(glyphWidth+1) - 1
	shift := 0
	switch a {
	case anchorMiddle:
		shift = w / 2
	case anchorEnd:
		shift = w
	}
	px, py := int(math.Round(x*s1)), int(math.Round(y*s1))
	for i, r := range runes {
		g := glyph(r)
		for row := range glyphHeight {
			for colIdx := range glyphWidth {
				if g[row]&(1<<(glyphWidth-1-colIdx)) == 0 {
					continue
				}
				u := i*(glyphWidth+1) + colIdx - shift // along the text
				v := row - glyphHeight/2               // across it, from the middle
				if vertical {
					// Reading bottom to top: along the text is up.
					c.fill(px+v*s1, py-(u+1)*s1, px+(v+1)*s1, py-u*s1, col)
				} else {
					c.fill(px+u*s1, py+v*s1, px+(u+1)*s1, py+(v+1)*s1, col)
				}
			}
		}
	}
}
