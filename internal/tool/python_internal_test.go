package tool

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shellgate/shellgate/sandbox"
)

// TestKernelAnswerHostile feeds the host's reader of the kernel client's
// answer what a hostile sandbox could print instead: everything it keeps
// stays bounded and valid, and what is not the driver's is dropped.
func TestKernelAnswerHostile(t *testing.T) {
	a := &kernelAnswer{maxChars: 100}
	feed := func(s string) {
		// In odd pieces, as pipes deliver.
		for len(s) > 0 {
			n := min(len(s), 7)
			a.feed(1, []byte(s[:n]))
			s = s[n:]
		}
	}
	feed("not json\n{\"t\":\"bogus\"}\n")
	feed(strings.Repeat("x", maxKernelLine+10) + "\n")
	for range 2000 {
		feed(`{"t":"note","text":"` + strings.Repeat("é", 2000) + `"}` + "\n")
	}
	png := base64.StdEncoding.EncodeToString(append([]byte("\x89PNG"), make([]byte, 100)...))
	big := base64.StdEncoding.EncodeToString(make([]byte, MaxPythonImageBytes+1))
	feed(`{"t":"display","data":{"image/png":"!!!"}}` + "\n")
	feed(`{"t":"display","data":{"image/png":"` + big + `"}}` + "\n")
	for range 20 {
		feed(`{"t":"display","data":{"image/png":"` + png + `","text/plain":"` + strings.Repeat("p", 500) + `"}}` + "\n")
	}
	feed(`{"t":"stream","name":"stdout","text":"` + strings.Repeat("\xff", 50) + strings.Repeat("o", 1000) + `"}` + "\n")
	feed(`{"t":"error","ename":"E","evalue":"v","traceback":["` + strings.Repeat(`\u001b[31mline\u001b[0m","`, 200) + `end"]}` + "\n")
	feed(`{"t":"done","timed_out":false,"stdout_chars":5000000}` + "\n")
	feed(`{"t":"stream","name":"stdout","text":"after done"}` + "\n")
	o := a.result(sandbox.Result{}, PythonCall{MaxOutputLength: 100})

	if a.images() != MaxPythonImages {
		t.Errorf("%d images kept, want %d", a.images(), MaxPythonImages)
	}
	if n := len(o.Displays); n > MaxPythonImages+8 {
		t.Errorf("%d displays kept", n)
	}
	for _, d := range o.Displays {
		if !d.IsImage() && utf8.RuneCountInString(d.Text) > 100+100 {
			t.Errorf("display text not capped: %d", len(d.Text))
		}
	}
	if len(o.Notes) > maxKernelNotes+200 || !utf8.ValidString(o.Notes) {
		t.Errorf("notes: %d bytes, valid %v", len(o.Notes), utf8.ValidString(o.Notes))
	}
	if !strings.Contains(o.Stdout, TruncationMarker) || strings.Contains(o.Stdout, "after done") || !utf8.ValidString(o.Stdout) {
		t.Errorf("stdout %q", o.Stdout)
	}
	tb := strings.Join(o.Error.Traceback, "\n")
	if strings.Contains(tb, "\x1b") || utf8.RuneCountInString(tb) > 300 {
		t.Errorf("traceback: %d chars %q", utf8.RuneCountInString(tb), tb[:min(len(tb), 80)])
	}
	if a.bad < 4 || !strings.Contains(o.Notes, "not understood") && !strings.Contains(o.Notes, "further notes dropped") {
		t.Errorf("bad lines %d, notes %q", a.bad, o.Notes[:min(80, len(o.Notes))])
	}
}
