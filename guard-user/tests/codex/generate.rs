//! Seeded generation of `.rules` policies and the command lines to check against them: prefix
//! rules with alternatives (in the first position too), host executables, several files read
//! as one policy, `match`/`not_match` examples (some of them wrong, so the policy fails to load),
//! and commands near the rules, with programs written as paths for `--resolve-host-executables`.

/// splitmix64: small, seeded, and the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const PROGRAMS: &[&str] = &["git", "ls", "rm", "cargo", "npm", "curl", "sh", "python3"];
const ARGS: &[&str] = &[
    "status", "push", "log", "-rf", "build", "test", "--force", "origin", "main", "install", "-c",
    "x", "a b", "", "*", "$HOME", "--", "é", "run", "-",
];
const DECISIONS: &[&str] = &["allow", "prompt", "forbidden"];
const JUSTIFICATIONS: &[&str] = &[
    "pushes leave the machine",
    "say \"please\" first",
    "back\\slash and é",
    "deletes files",
];
/// Folders a program's absolute path is written under (`host_executable` lists some of them).
const BIN_DIRS: &[&str] = &["/usr/bin", "/usr/local/bin", "/opt/tools/bin"];

/// One position of a generated pattern.
#[derive(Clone, Debug)]
enum Token {
    One(String),
    Alts(Vec<String>),
}

impl Token {
    fn starlark(&self) -> String {
        match self {
            Token::One(token) => quote(token),
            Token::Alts(alts) => list(alts),
        }
    }

    fn instance(&self, rng: &mut Rng) -> String {
        match self {
            Token::One(token) => token.clone(),
            Token::Alts(alts) => rng.pick(alts).clone(),
        }
    }
}

/// A Starlark string literal (JSON's escapes are Starlark's for these characters).
pub fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| quote(item)).collect();
    format!("[{}]", quoted.join(", "))
}

/// Two or three distinct entries of `from`.
fn alternatives(rng: &mut Rng, from: &[&str]) -> Vec<String> {
    let mut alts: Vec<String> = Vec::new();
    let want = 2 + rng.below(2);
    for _ in 0..10 {
        if alts.len() == want {
            break;
        }
        let candidate = rng.pick(from).to_string();
        if !alts.contains(&candidate) {
            alts.push(candidate);
        }
    }
    alts
}

/// A generated policy: its files (name, contents) in the order they are given, and the
/// patterns its commands are drawn from.
pub struct GeneratedPolicy {
    pub files: Vec<(String, String)>,
    patterns: Vec<Vec<Token>>,
    /// Names a `host_executable` was written for.
    pub host_names: Vec<String>,
    /// A `match`/`not_match` example was written wrong on purpose: the policy fails to load.
    pub broken_examples: bool,
}

pub fn policy(rng: &mut Rng, index: usize) -> GeneratedPolicy {
    let file_count = match rng.below(100) {
        0..=49 => 1,
        50..=84 => 2,
        _ => 3,
    };
    let mut generated = GeneratedPolicy {
        files: Vec::new(),
        patterns: Vec::new(),
        host_names: Vec::new(),
        broken_examples: false,
    };
    // At most one deliberate error per policy, so its message is the one both tools report.
    let broken = rng.percent(12).then(|| rng.below(file_count));
    for file in 0..file_count {
        let mut text = String::from("# generated\n");
        for _ in 0..(2 + rng.below(7)) {
            let pattern = pattern(rng);
            text.push_str(&rule_call(rng, &pattern, broken == Some(file)));
            generated.patterns.push(pattern);
        }
        if broken == Some(file) {
            generated.broken_examples = true;
            let pattern = pattern(rng);
            text.push_str(&broken_rule_call(rng, &pattern));
        }
        if rng.percent(50) {
            let name = rng.pick(PROGRAMS).to_string();
            let paths: Vec<String> = BIN_DIRS[..1 + rng.below(2)]
                .iter()
                .map(|dir| format!("{dir}/{name}"))
                .collect();
            text.push_str(&format!(
                "host_executable(name = {}, paths = {})\n",
                quote(&name),
                list(&paths)
            ));
            generated.host_names.push(name);
        }
        if rng.percent(30) {
            text.push_str(&format!(
                "network_rule(host = \"api{}.example.com\", protocol = \"https\", decision = \"{}\")\n",
                rng.below(5),
                rng.pick(&["allow", "deny"])
            ));
        }
        generated
            .files
            .push((format!("p{index}/f{file}.rules"), text));
    }
    generated
}

fn pattern(rng: &mut Rng) -> Vec<Token> {
    let first = if rng.percent(20) {
        Token::Alts(alternatives(rng, PROGRAMS))
    } else {
        Token::One(rng.pick(PROGRAMS).to_string())
    };
    let mut pattern = vec![first];
    for _ in 0..rng.below(4) {
        pattern.push(if rng.percent(30) {
            Token::Alts(alternatives(rng, ARGS))
        } else {
            Token::One(rng.pick(ARGS).to_string())
        });
    }
    pattern
}

fn pattern_list(pattern: &[Token]) -> String {
    let tokens: Vec<String> = pattern.iter().map(Token::starlark).collect();
    format!("[{}]", tokens.join(", "))
}

fn instance(rng: &mut Rng, pattern: &[Token]) -> Vec<String> {
    pattern.iter().map(|token| token.instance(rng)).collect()
}

/// `prefix_rule(...)` with an optional decision, justification and correct examples.
fn rule_call(rng: &mut Rng, pattern: &[Token], in_broken_file: bool) -> String {
    let mut call = format!("prefix_rule(pattern = {}", pattern_list(pattern));
    if rng.percent(75) {
        call.push_str(&format!(", decision = \"{}\"", rng.pick(DECISIONS)));
    }
    if rng.percent(30) {
        let justification = rng.pick::<&str>(JUSTIFICATIONS);
        call.push_str(&format!(", justification = {}", quote(justification)));
    }
    // Examples that hold: instances of the pattern (with arguments after it) match; the pattern
    // with its last token replaced by one no list holds does not. Fewer in a file that will
    // fail anyway, so the failure is the deliberate one.
    if !in_broken_file && rng.percent(30) {
        let mut example = instance(rng, pattern);
        if rng.percent(50) {
            example.push("extra".to_string());
        }
        call.push_str(&format!(", match = [{}]", list(&example)));
    }
    if !in_broken_file && pattern.len() > 1 && rng.percent(25) {
        let mut example = instance(rng, pattern);
        *example.last_mut().expect("two tokens or more") = "never-a-token".to_string();
        call.push_str(&format!(", not_match = [{}]", list(&example)));
    }
    call.push_str(")\n");
    call
}

/// A `prefix_rule` whose examples are wrong: a `match` no rule of the call matches, or a
/// `not_match` the rule matches.
fn broken_rule_call(rng: &mut Rng, pattern: &[Token]) -> String {
    let decision = rng.pick(DECISIONS);
    if rng.percent(50) {
        format!(
            "prefix_rule(pattern = {}, decision = \"{decision}\", match = [[\"never-a-program\", \"x\"]])\n",
            pattern_list(pattern)
        )
    } else {
        let example = instance(rng, pattern);
        format!(
            "prefix_rule(pattern = {}, decision = \"{decision}\", not_match = [{}])\n",
            pattern_list(pattern),
            list(&example)
        )
    }
}

/// A command line near the policy's rules: an instance of one (with more arguments, or cut
/// short, or one token changed), or something no rule names; its program sometimes written as
/// a path (absolute, with `..`, relative, under `~`).
pub fn command(rng: &mut Rng, policy: &GeneratedPolicy) -> Vec<String> {
    let mut command = if rng.percent(80) && !policy.patterns.is_empty() {
        let pattern = rng.pick(&policy.patterns).clone();
        let mut command = instance(rng, &pattern);
        match rng.below(10) {
            0..=3 => {
                for _ in 0..rng.below(3) {
                    command.push(rng.pick(ARGS).to_string());
                }
            }
            4 if command.len() > 1 => {
                command.pop();
            }
            5 => {
                let at = rng.below(command.len());
                command[at] = rng.pick(ARGS).to_string();
            }
            _ => {}
        }
        command
    } else {
        let mut command = vec![rng.pick(PROGRAMS).to_string()];
        for _ in 0..rng.below(4) {
            command.push(rng.pick(ARGS).to_string());
        }
        command
    };
    // The program must not read as an option of `execpolicy check` itself.
    if command[0].starts_with('-') {
        command[0] = "git".to_string();
    }
    if rng.percent(40) {
        let name = if !policy.host_names.is_empty() && rng.percent(50) {
            rng.pick(&policy.host_names).clone()
        } else {
            command[0].clone()
        };
        command[0] = match rng.below(8) {
            0..=2 => format!("{}/{name}", rng.pick(BIN_DIRS)),
            3 => format!("/usr/bin/../bin/{name}"),
            4 => format!("./{name}"),
            5 => format!("bin/{name}"),
            6 => format!("~/bin/{name}"),
            _ => format!("/home/u/{name}"),
        };
    }
    command
}
