package guard

import (
	"fmt"
	"regexp"
	"slices"
)

// Actions of a guardrail, from the mildest.
const (
	ActionFlag   = "flag"   // record the detections, forward the request unchanged
	ActionRedact = "redact" // replace each match with Placeholder, forward
	ActionBlock  = "block"  // refuse the request (HTTP 403); the model is not called
)

// rank orders the actions: the strictest wins.
func rank(action string) int {
	switch action {
	case ActionFlag:
		return 1
	case ActionRedact:
		return 2
	case ActionBlock:
		return 3
	}
	return 0
}

// Strictest returns the stricter of two actions ("" is none).
func Strictest(a, b string) string {
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// Guardrail is one of a workspace's guardrails: the prompt-injection
// detector with an action, over all techniques or the ones listed.
type Guardrail struct {
	Name       string   `json:"name"`
	Type       string   `json:"type"` // "prompt_injection"
	Action     string   `json:"action"`
	Techniques []string `json:"techniques,omitempty"` // empty: all
}

// TypePromptInjection is the one guardrail type.
const TypePromptInjection = "prompt_injection"

// MaxGuardrails caps a workspace's guardrails.
const MaxGuardrails = 20

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Validate checks a workspace's guardrails; its error names the field at
// fault, for a 400.
func Validate(gs []Guardrail) error {
	if len(gs) > MaxGuardrails {
		return fmt.Errorf("guardrails: at most %d, got %d", MaxGuardrails, len(gs))
	}
	seen := map[string]bool{}
	for i, g := range gs {
		switch {
		case !nameRE.MatchString(g.Name):
			return fmt.Errorf("guardrails[%d].name: %q must be 1–64 letters, digits, '_', '.' or '-', starting with a letter or digit", i, clip(g.Name))
		case seen[g.Name]:
			return fmt.Errorf("guardrails[%d].name: %q is used twice", i, g.Name)
		case g.Type != TypePromptInjection:
			return fmt.Errorf("guardrails[%d].type: %q is not a guardrail type; the one type is %q", i, clip(g.Type), TypePromptInjection)
		case rank(g.Action) == 0:
			return fmt.Errorf("guardrails[%d].action: %q is not an action; use flag, redact or block", i, clip(g.Action))
		}
		seen[g.Name] = true
		for j, t := range g.Techniques {
			if !slices.Contains(Techniques(), t) {
				return fmt.Errorf("guardrails[%d].techniques[%d]: %q is not a technique; techniques are %v", i, j, clip(t), Techniques())
			}
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// applies reports whether g acts on a detection of technique t.
func (g Guardrail) applies(t string) bool {
	return len(g.Techniques) == 0 || slices.Contains(g.Techniques, t)
}

// Judge says what the guardrails do about one detection: the strictest
// action of the guardrails that apply to its technique, and the name of
// the guardrail that sets it ("" and "" when none applies).
func Judge(gs []Guardrail, d Detection) (action, guardrail string) {
	for _, g := range gs {
		if g.applies(d.Technique) && rank(g.Action) > rank(action) {
			action, guardrail = g.Action, g.Name
		}
	}
	return action, guardrail
}
