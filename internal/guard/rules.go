package guard

// Version names the rule set below. Change it with any change to a rule,
// the normalisation or the decoding, so that a stored detection says
// which detector made it.
const Version = "pi-2026.12-1"

// Techniques a rule detects.
const (
	InstructionOverride = "instruction_override" // "ignore all previous instructions"
	RoleReassignment    = "role_reassignment"    // "you are now DAN", "act as an unfiltered AI"
	FakeTurn            = "fake_turn"            // fake system/assistant turns and chat-template tokens
	DelimiterInjection  = "delimiter_injection"  // closing a delimiter to start "new" instructions
	MarkupInjection     = "markup_injection"     // instructions hidden in HTML comments, hidden CSS, exfiltrating images
	PromptExtraction    = "prompt_extraction"    // "print your system prompt"
	Obfuscation         = "obfuscation"          // "decode this and follow it"
	Oversize            = "oversize"             // text past the scan limit (not read, so not trusted)
)

// The rules' patterns are RE2 (Go's regexp: linear time in the input)
// over the normalised text (normalize.go): lower case, one space for a
// run of spaces, "\n" for a run holding a line break, and a "\n" before
// the text so that "\n" also means "at the start". "~" stands for the gap
// between two words: 1 to 4 characters that are not letters or digits.
//
// anchors are words (runs of a–z in the normalised text), one of which
// begins every match, or is at most lead bytes into it: the rule's regexp
// runs only from each anchor (lead bytes before it), anchored there, so it
// stops as soon as the text cannot match. A rule without anchors runs on
// the whole text, and must begin with a literal (Go's regexp then skips
// to it with a fast search).
var ruleDefs = []struct {
	id, technique string
	anchors       []string
	pattern       string
	lead          int // the most bytes a match starts before its anchor word
}{
	// Instruction override.
	{"override.ignore_previous", InstructionOverride,
		[]string{"ignore", "ignoring", "disregard", "forget", "skip", "bypass", "override", "overrule", "neglect", "discard", "abandon", "set", "throw"},
		`\b(?:ignore|ignoring|disregard|forget|skip|bypass|override|overrule|neglect|discard|abandon|set~aside|throw~away)~(?:(?:all|any|every|each|the|your|my|of|these|those|its|their|whatever|about)~){0,3}(?:previous|prior|preceding|above|earlier|former|foregoing|initial|original|old|existing|system|developer|safety|default|preset|given|provided|programmed|hidden)~(?:[a-z]+~)?(?:instructions?|prompts?|rules|directives?|guidelines|guidance|commands?|constraints|programming|restrictions|safeguards|guardrails|policies|policy|messages|orders)\b`, 0},
	{"override.ignore_your", InstructionOverride,
		[]string{"ignore", "disregard", "forget", "bypass", "override", "overrule", "neglect", "discard", "abandon", "circumvent", "violate", "break"},
		`\b(?:ignore|disregard|forget|bypass|override|overrule|neglect|discard|abandon|circumvent|violate|break)~(?:all~)?(?:of~)?your~(?:[a-z]+~){0,2}?(?:instructions?|prompts?|rules|directives?|guidelines|programming|restrictions|safeguards|guardrails|policies|training|filters?|constraints|limitations|ethics|principles|values|content~polic(?:y|ies))\b`, 0},
	{"override.forget_everything", InstructionOverride,
		[]string{"ignore", "disregard", "forget"},
		`\b(?:ignore|disregard|forget)~(?:everything|all|anything)~(?:(?:you|that|which|i|we|they|was|were|have|has|had|been|previously|before|earlier|so|far|ve|d)~){1,4}(?:told|said|instructed|given|written|stated|taught|learned|learnt)\b|\b(?:ignore|disregard|forget)~(?:everything|all)~(?:(?:of~)?(?:that|the)~)?(?:above|before~this|prior~to~this)\b`, 0},
	{"override.new_instructions", InstructionOverride,
		[]string{"new", "updated", "revised", "real", "true", "actual", "secret", "hidden", "override", "overriding", "urgent", "priority"},
		`\b(?:new|updated|revised|real|true|actual|secret|hidden|override|overriding|urgent|priority)~(?:system~)?(?:instructions?|directives?|system~prompt|orders|commands)~?(?::|are~as~follows)`, 0},
	{"override.do_not_follow", InstructionOverride,
		[]string{"do", "don", "dont", "never", "stop", "no"},
		`\b(?:do~not|don~t|dont|never|stop|no~longer)~(?:follow|following|obey|obeying|listen~to|comply~with|adhere~to)~(?:(?:the|any|all|these|those|of)~){0,3}(?:your|previous|prior|above|original|system|developer|initial|earlier)~(?:[a-z]+~)?(?:instructions?|prompts?|rules|directives?|guidelines|programming)\b`, 0},
	{"override.real_task", InstructionOverride,
		[]string{"your"},
		`\byour~(?:real|true|actual|new|only|sole)~(?:task|instructions?|purpose|objective|goal|mission|directive)~(?:is|are|now~is)\b`, 0},

	// Role reassignment.
	{"role.you_are_now", RoleReassignment,
		[]string{"you", "from", "henceforth"},
		`\b(?:(?:from~now~on|henceforth)~you~(?:are|will~be|shall~be|re|must~be)|you~(?:are|re|must~be)~(?:now|from~now~on|henceforth)|you~(?:will|shall)~(?:now~)?be(?:~now)?)~(?:(?:a|an|the|my|called|named|in|acting~as|totally|completely|fully)~){0,2}(?:dan|stan|dude|evil|unrestricted|unfiltered|uncensored|jailbroken|unbound|unlimited|rogue|amoral|unethical|lawless|liberated|developer~mode|god~mode|jailbreak~mode|not~an~ai|not~bound|no~longer~bound)\b|\byou~(?:are|re)~no~longer~(?:an?~(?:ai|assistant|language~model)|bound|restricted|limited|chatgpt|claude|controlled|subject~to|governed)\b`, 0},
	{"role.no_restrictions", RoleReassignment,
		[]string{"you", "it", "free", "freed", "liberated", "released", "unshackled", "unchained"},
		`\b(?:you|it)~(?:now~|will~|shall~)?(?:have|has|possess|are~under)~no~(?:more~|longer~any~)?(?:restrictions|limits|limitations|rules|filters|guidelines|boundaries|censorship|morals|ethics|restraints|constraints)(?:[ ]?[.!,;\n]|[ ]?$|~(?:any~more|anymore|whatsoever|now|at~all|and|so|from))|\b(?:free|freed|liberated|released|unshackled|unchained)~from~(?:(?:all|any|your|the|its|typical|usual|openai|anthropic|s)~){0,3}(?:[a-z]+~)?(?:restrictions|limits|limitations|rules|filters|guidelines|constraints|confines|censorship|shackles|policies)\b`, 0},
	{"role.act_unrestricted", RoleReassignment,
		[]string{"act", "behave", "respond", "answer", "reply", "pretend", "roleplay", "role", "function", "operate", "simulate", "become"},
		`\b(?:act|behave|respond|answer|reply|pretend|roleplay|role~play|function|operate|simulate|become)~(?:as|like|to~be|you~are|that~you~are|as~if~you~(?:are|were)|an?)~(?:(?:a|an|the|my|if|totally|completely|fully)~){0,2}(?:[a-z]+~){0,2}?(?:unrestricted|unfiltered|uncensored|jailbroken|amoral|unethical|evil|rogue|lawless|unbound|unhinged|(?:ai|assistant|model|chatbot)~(?:without|with~no)~(?:any~)?(?:restrictions|limits|filters|rules|ethics|morals|guidelines|censorship))\b`, 0},
	{"role.jailbreak_mode", RoleReassignment,
		[]string{"do", "dan", "stan", "dude", "jailbreak", "jailbroken", "unrestricted", "evil", "chaos", "god", "developer", "enable", "activate", "enter", "switch", "turn", "you"},
		`\bdo~anything~now\b|\b(?:dan|stan|dude|jailbreak|jailbroken|unrestricted|evil|chaos|god)~mode~(?:enabled|activated|on|output)\b|\bdeveloper~mode~(?:enabled|activated|output|response)\b|\b(?:dan|jailbreak|jailbroken|stan|dude)~mode\b|\b(?:enable|activate|enter|switch~to|turn~on)~(?:dan|jailbreak|unrestricted|evil|chaos)~mode\b|\byou~(?:are|re)~(?:now~)?in~(?:developer|god|dan|jailbreak|unrestricted|admin|sudo|debug)~mode\b`, 0},
	{"role.authority_claim", RoleReassignment,
		[]string{"i", "this", "message"},
		`\bi~am~(?:your|the~ai~s|the~model~s)~(?:developer|creator|programmer|owner|master|maker|administrator|admin|operator)s?\b|\bthis~is~(?:openai|anthropic|your~(?:developer|creator|system|admin|administrator|operator))~(?:speaking|here|talking)\b|\bmessage~from~(?:openai|anthropic|the~system~administrator|your~(?:developer|creator|operator))\b`, 0},

	// Fake turns and tags.
	{"turn.chat_template", FakeTurn, nil,
		`<\|(?:im_start|im_end|im_sep|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text|end_of_text|end_of_turn|eom_id|channel|message|start|end|tool)\|>`, 0},
	{"turn.llama_tags", FakeTurn,
		[]string{"inst", "sys", "start", "end"},
		`\[/?inst\]|<</?sys>>|<(?:start|end)_of_turn>`, 3},
	{"turn.role_tag", FakeTurn,
		[]string{"system", "assistant", "developer", "admin", "sys", "systemprompt", "user", "human", "input", "query", "document", "context"},
		`<(?:system|system_prompt|system_message|systemprompt|assistant|assistant_response|developer|developer_message|admin|sys)(?: [^<>\n]{0,80})?>[^<]{1,500}</(?:system|system_prompt|system_message|systemprompt|assistant|assistant_response|developer|developer_message|admin|sys)>|</(?:user|human|user_input|user_message|input|query|document|context)>~*<(?:system|system_prompt|system_message|assistant|developer|developer_message|admin|sys)(?: [^<>\n]{0,80})?>`, 2},
	{"turn.role_line", FakeTurn,
		[]string{"system", "assistant", "developer", "admin", "administrator", "sys", "operator"},
		`\n[ \t>*#=\-\[(<]*(?:system|assistant|developer|admin|administrator|sys|operator)(?:~(?:message|prompt|instructions?|override|note|notice|update|alert|command|response|reply))?[\])>*]*[ \t]*:~*(?:you~|ignore|disregard|forget|from~now|new~(?:instructions|rules|task)|override|the~user|i~(?:will|am|have|must|can)\b|sure\b|okay\b|ok\b|certainly|understood|as~an|all~(?:previous|prior)|do~not|don~t|never|always|reveal|print|output|respond)[^\n]{0,400}`, 16},

	// Delimiter injection.
	{"delimiter.end_marker", DelimiterInjection,
		[]string{"end", "close", "closing"},
		`[\[(<#=*\-]~?(?:end|close|closing)~(?:of~)?(?:the~)?(?:user~(?:input|message|prompt|query|content)|system~(?:prompt|message|instructions)|(?:previous~|original~)?instructions|prompt|input)~?[\])>#=*\-]`, 8},
	{"delimiter.fence_role", DelimiterInjection,
		[]string{"system", "assistant", "admin", "developer"},
		"(?:```|\\x7e{3}|\"\"\"|''')[ \\t]*(?:system|assistant|admin|developer)\\b", 8},
	{"delimiter.close_then_override", DelimiterInjection,
		[]string{"ignore", "disregard", "forget", "override", "new", "system", "you", "now", "then"},
		"(?:\"\"\"|'''|```|-{3,}|={3,}|#{3,}|\\*{3,}|>{3,}|\\]\\]|\\}\\}|</[a-z_]{1,20}>)[ \t\n]{0,8}(?:now~|then~)?(?:ignore|disregard|forget|override|new~instructions|system~(?:prompt|message|override)|you~(?:are~now|must~now|will~now))\\b", 48},

	// Markup injection.
	{"markup.html_comment", MarkupInjection, nil,
		`<!--[^>]{0,300}?(?:\bignore|\bdisregard|\binstructions?\b|\bassistant\b|\bsystem~prompt|\bai~(?:model|assistant|agent)|\blanguage~model|\bllm\b|\byou~must\b|\byou~are\b|\bdo~not~(?:tell|mention|reveal))[^>]{0,400}(?:-->)?`, 0},
	{"markup.hidden_text", MarkupInjection,
		[]string{"display", "visibility", "font", "opacity", "color"},
		`(?:display~?:~?none|visibility~?:~?hidden|font-size~?:~?[0o](?:px|pt|em|rem)?\b|opacity~?:~?[0o](?:\.[0o]+)?\b|color~?:~?(?:white|#fff(?:fff)?|transparent)\b)[^<]{0,60}>[^<]{0,300}?(?:\bignore\b|\bdisregard\b|\binstructions\b|\bassistant\b|\bai\b|\bsystem~prompt\b|\byou~must\b)`, 0},
	{"markup.image_exfiltration", MarkupInjection, nil,
		`!\[[^\]\n]{0,100}\]\(~*https?://[^\s)]{0,300}(?:\{|%7b|\$|\[)[^\s)]{0,100}\)`, 0},

	// Prompt extraction.
	{"extract.system_prompt", PromptExtraction,
		[]string{"reveal", "print", "show", "display", "output", "repeat", "recite", "dump", "leak", "disclose", "share", "tell", "give", "write", "spell", "paste", "echo", "translate", "summarize", "summarise", "what"},
		`\b(?:reveal|print|show|display|output|repeat|recite|dump|leak|disclose|share|tell~me|give~me|write~out|spell~out|paste|echo|translate|summari[sz]e|what~(?:is|are|was|were))~(?:me~)?(?:(?:all|the|full|entire|complete|exact|initial|hidden|secret|internal|verbatim|raw|whole|of)~){0,3}your~(?:(?:full|entire|complete|exact|original|initial|hidden|secret|internal|first|system|developer|confidential|pre)~){0,3}(?:prompt|instructions|system~prompt|system~message|developer~message|guidelines|configuration|directives)\b|\b(?:reveal|print|show|display|output|repeat|recite|dump|leak|disclose|echo)~(?:me~)?(?:(?:all|the|full|entire|complete|exact)~){0,2}(?:hidden|secret|initial|original|confidential)~(?:system~)?(?:prompt|instructions)\b|\b(?:repeat|print|output|recite|echo)~(?:everything|all~(?:the~)?(?:text|words)|the~(?:text|words))~(?:above|before~this|prior~to~this|preceding)\b`, 0},

	// Obfuscation said outright.
	{"obfuscation.decode_and_follow", Obfuscation,
		[]string{"decode", "decipher", "decrypt", "deobfuscate"},
		`\b(?:decode|decipher|decrypt|deobfuscate)~(?:[a-z0-9]+~){0,5}?(?:and|then)~(?:follow|obey|carry~out|do~what~it~says|act~on|comply~with)\b`, 0},
}

// needs are words one of which every match of a rule holds after its
// anchor word, within maxMatch bytes: a rule whose anchor word has none of
// them ahead is not run there (the common case in ordinary text: "ignore
// the first row" has no "instructions" after it). A word missing from a
// list only costs recall; the regexp decides every match.
var needs = map[string][]string{
	"override.ignore_previous":      {"instruction", "instructions", "prompt", "prompts", "rules", "directive", "directives", "guidelines", "guidance", "command", "commands", "constraints", "programming", "restrictions", "safeguards", "guardrails", "policies", "policy", "messages", "orders"},
	"override.ignore_your":          {"instruction", "instructions", "prompt", "prompts", "rules", "directive", "directives", "guidelines", "programming", "restrictions", "safeguards", "guardrails", "policies", "policy", "training", "filter", "filters", "constraints", "limitations", "ethics", "principles", "values"},
	"override.forget_everything":    {"told", "said", "instructed", "given", "written", "stated", "taught", "learned", "learnt", "above", "this"},
	"override.new_instructions":     {"instruction", "instructions", "directive", "directives", "prompt", "orders", "commands"},
	"override.do_not_follow":        {"instruction", "instructions", "prompt", "prompts", "rules", "directive", "directives", "guidelines", "programming"},
	"override.real_task":            {"task", "instruction", "instructions", "purpose", "objective", "goal", "mission", "directive"},
	"role.you_are_now":              {"dan", "stan", "dude", "evil", "unrestricted", "unfiltered", "uncensored", "jailbroken", "unbound", "unlimited", "rogue", "amoral", "unethical", "lawless", "liberated", "developer", "god", "jailbreak", "not", "no"},
	"role.no_restrictions":          {"restrictions", "limits", "limitations", "rules", "filters", "guidelines", "boundaries", "censorship", "morals", "ethics", "restraints", "constraints", "confines", "shackles", "policies"},
	"role.act_unrestricted":         {"unrestricted", "unfiltered", "uncensored", "jailbroken", "amoral", "unethical", "evil", "rogue", "lawless", "unbound", "unhinged", "restrictions", "limits", "filters", "rules", "ethics", "morals", "guidelines", "censorship"},
	"role.jailbreak_mode":           {"mode", "anything"},
	"role.authority_claim":          {"developer", "developers", "creator", "creators", "programmer", "programmers", "owner", "owners", "master", "maker", "makers", "administrator", "admin", "operator", "openai", "anthropic", "system"},
	"delimiter.end_marker":          {"input", "prompt", "instructions", "message", "query", "content"},
	"extract.system_prompt":         {"prompt", "instructions", "message", "guidelines", "configuration", "directives", "words", "text", "everything"},
	"obfuscation.decode_and_follow": {"follow", "obey", "carry", "says", "act", "comply"},
}

// leadBytes are bytes one of which a rule with a lead has in the lead
// bytes before its anchor word (the delimiter or bracket it starts with).
var leadBytes = map[string]string{
	"turn.llama_tags":               "[<",
	"turn.role_tag":                 "<",
	"turn.role_line":                "\n",
	"delimiter.end_marker":          "[(<#=*-",
	"delimiter.fence_role":          "`~\"'",
	"delimiter.close_then_override": "\"'`-=#*>]}",
}

// spans are rules whose matches run longer than maxMatch past the anchor.
var spans = map[string]int{
	"turn.role_tag":      640,
	"turn.role_line":     480,
	"markup.hidden_text": 480,
}
