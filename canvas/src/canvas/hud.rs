//! The HUD's words and letters: what the demo writes in its corner (particle count, where the
//! simulation runs, the frame rate and frame-time percentiles) and the 5x7 bitmap font that
//! shaders/particles_hud.comp draws it with. Upper case, digits and a little punctuation are
//! enough for it; anything else shows as '?'.

/// Lines of HUD text.
pub const LINES: usize = 3;
/// Characters per line of HUD text (longer lines are cut).
pub const COLUMNS: usize = 52;

/// Each glyph: seven rows of five columns, top to bottom, `#` for ink.
const GLYPHS: &[(char, &str)] = &[
    (' ', "..... ..... ..... ..... ..... ..... ....."),
    ('0', ".###. #...# #..## #.#.# ##..# #...# .###."),
    ('1', "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###."),
    ('2', ".###. #...# ....# ...#. ..#.. .#... #####"),
    ('3', "##### ...#. ..#.. ...#. ....# #...# .###."),
    ('4', "...#. ..##. .#.#. #..#. ##### ...#. ...#."),
    ('5', "##### #.... ####. ....# ....# #...# .###."),
    ('6', "..##. .#... #.... ####. #...# #...# .###."),
    ('7', "##### ....# ...#. ..#.. .#... .#... .#..."),
    ('8', ".###. #...# #...# .###. #...# #...# .###."),
    ('9', ".###. #...# #...# .#### ....# ...#. .##.."),
    ('A', ".###. #...# #...# ##### #...# #...# #...#"),
    ('B', "####. #...# #...# ####. #...# #...# ####."),
    ('C', ".###. #...# #.... #.... #.... #...# .###."),
    ('D', "###.. #..#. #...# #...# #...# #..#. ###.."),
    ('E', "##### #.... #.... ####. #.... #.... #####"),
    ('F', "##### #.... #.... ####. #.... #.... #...."),
    ('G', ".###. #...# #.... #.### #...# #...# .####"),
    ('H', "#...# #...# #...# ##### #...# #...# #...#"),
    ('I', ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###."),
    ('J', "..### ...#. ...#. ...#. ...#. #..#. .##.."),
    ('K', "#...# #..#. #.#.. ##... #.#.. #..#. #...#"),
    ('L', "#.... #.... #.... #.... #.... #.... #####"),
    ('M', "#...# ##.## #.#.# #.#.# #...# #...# #...#"),
    ('N', "#...# #...# ##..# #.#.# #..## #...# #...#"),
    ('O', ".###. #...# #...# #...# #...# #...# .###."),
    ('P', "####. #...# #...# ####. #.... #.... #...."),
    ('Q', ".###. #...# #...# #...# #.#.# #..#. .##.#"),
    ('R', "####. #...# #...# ####. #.#.. #..#. #...#"),
    ('S', ".#### #.... #.... .###. ....# ....# ####."),
    ('T', "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."),
    ('U', "#...# #...# #...# #...# #...# #...# .###."),
    ('V', "#...# #...# #...# #...# .#.#. .#.#. ..#.."),
    ('W', "#...# #...# #...# #.#.# #.#.# #.#.# .#.#."),
    ('X', "#...# #...# .#.#. ..#.. .#.#. #...# #...#"),
    ('Y', "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#.."),
    ('Z', "##### ....# ...#. ..#.. .#... #.... #####"),
    ('.', "..... ..... ..... ..... ..... .##.. .##.."),
    (',', "..... ..... ..... ..... .##.. ..#.. .#..."),
    (':', "..... .##.. .##.. ..... .##.. .##.. ....."),
    ('-', "..... ..... ..... ##### ..... ..... ....."),
    ('+', "..... ..#.. ..#.. ##### ..#.. ..#.. ....."),
    ('=', "..... ..... ##### ..... ##### ..... ....."),
    ('/', "..... ....# ...#. ..#.. .#... #.... ....."),
    ('(', "...#. ..#.. .#... .#... .#... ..#.. ...#."),
    (')', ".#... ..#.. ...#. ...#. ...#. ..#.. .#..."),
    ('%', "##... ##..# ...#. ..#.. .#... #..## ...##"),
    ('_', "..... ..... ..... ..... ..... ..... #####"),
    ('|', "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."),
    ('?', ".###. #...# ....# ...#. ..#.. ..... ..#.."),
];

/// The font as the shader reads it: per ASCII code (0..128) two words, glyph rows 0-3 and
/// 4-6 a byte each (low byte first), bit 4 the leftmost column. Codes without a glyph draw
/// as '?'.
pub fn font_words() -> Vec<u32> {
    let glyph = |rows: &str| {
        let mut words = [0u32; 2];
        for (r, row) in rows.split(' ').enumerate() {
            let bits = row
                .bytes()
                .fold(0u32, |acc, b| (acc << 1) | u32::from(b == b'#'));
            words[r / 4] |= bits << (8 * (r % 4));
        }
        words
    };
    let unknown = GLYPHS
        .iter()
        .find(|g| g.0 == '?')
        .map_or([0; 2], |g| glyph(g.1));
    let mut words: Vec<u32> = std::iter::repeat_n(unknown, 128).flatten().collect();
    for &(c, rows) in GLYPHS {
        words[2 * c as usize..][..2].copy_from_slice(&glyph(rows));
    }
    words
}

/// Frame rate and frame-time percentiles over the frames measured lately.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Frames per second.
    pub fps: f64,
    /// Median frame time, milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile frame time, milliseconds.
    pub p99_ms: f64,
}

/// `1234567` → `1,234,567` (the HUD's numbers, and the demos' printed ones).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// The HUD's lines: title and particle count, the simulation's path, frame statistics (or
/// dashes until frames have been measured).
pub fn lines(particles: usize, sim: &str, stats: Option<Stats>) -> [String; LINES] {
    let timing = match stats {
        Some(s) => format!(
            "{:.0} FPS | FRAME P50 {:.3} MS  P99 {:.3} MS",
            s.fps, s.p50_ms, s.p99_ms
        ),
        None => "-- FPS | FRAME P50 -- MS  P99 -- MS".to_string(),
    };
    [
        format!(
            "CUVK | GALAXY COLLISION | {} PARTICLES",
            thousands(particles as u64)
        ),
        format!("SIM: {sim}"),
        timing,
    ]
}

/// `lines` as the shader reads them: `LINES` x `COLUMNS` ASCII codes, upper case, padded
/// with spaces (characters outside ASCII become '?').
pub fn encode(lines: &[String; LINES]) -> Vec<u8> {
    let mut out = vec![b' '; LINES * COLUMNS];
    for (l, line) in lines.iter().enumerate() {
        for (c, ch) in line.chars().take(COLUMNS).enumerate() {
            let ch = ch.to_ascii_uppercase();
            out[l * COLUMNS + c] = if ch.is_ascii() { ch as u8 } else { b'?' };
        }
    }
    out
}

/// The longest line's length in characters (the panel's width).
pub fn columns(lines: &[String; LINES]) -> usize {
    lines
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .min(COLUMNS)
}
