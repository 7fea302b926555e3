package bench

import (
	"bufio"
	"fmt"
	"html"
	"image/color"
	"io"
)

// svgCanvas writes SVG elements as it is drawn on.
type svgCanvas struct {
	w   *bufio.Writer
	err error
}

func writeSVG(w io.Writer, f *figure) error {
	width, height := f.size()
	c := &svgCanvas{w: bufio.NewWriter(w)}
	c.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="monospace" font-size="10">`+"\n",
		width, height, width, height)
	c.printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	f.draw(c)
	c.printf("</svg>\n")
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

func (c *svgCanvas) printf(format string, args ...any) {
	if c.err == nil {
		_, c.err = fmt.Fprintf(c.w, format, args...)
	}
}

func svgColor(col color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", col.R, col.G, col.B) }

func (c *svgCanvas) line(x1, y1, x2, y2 float64, col color.RGBA, width float64, dashed bool) {
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="4 3"`
	}
	c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%g"%s/>`+"\n",
		x1, y1, x2, y2, svgColor(col), width, dash)
}

func (c *svgCanvas) rect(x, y, w, h float64, col color.RGBA) {
	if w <= 0 || h <= 0 {
		return
	}
	c.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, svgColor(col))
}

func (c *svgCanvas) dot(x, y, r float64, col color.RGBA) {
	c.printf(`<circle cx="%.1f" cy="%.1f" r="%g" fill="%s"/>`+"\n", x, y, r, svgColor(col))
}

func (c *svgCanvas) text(x, y float64, s string, col color.RGBA, a anchor, vertical bool) {
	if s == "" {
		return
	}
	anchors := [...]string{anchorStart: "start", anchorMiddle: "middle", anchorEnd: "end"}
	rot := ""
	if vertical {
		rot = fmt.Sprintf(` transform="rotate(-90 %.1f %.1f)"`, x, y)
	}
	c.printf(`<text x="%.1f" y="%.1f" fill="%s" text-anchor="%s" dominant-baseline="central"%s>%s</text>`+"\n",
		x, y, svgColor(col), anchors[a], rot, html.EscapeString(s))
}
