//! The files a config was read from, and where in them a span is.
//!
//! Every file read for one config (the main file, then each included one in the order read)
//! is given its own range of one offset space: file `i` starts at `base(i)`, one past the
//! end of file `i - 1`. Spans in the merged TOML tree are shifted into that space when the
//! file is parsed (`include`), so any span the deserializer or a validation check reports
//! names its file, and [`SourceMap::error`] turns it into `FILE:LINE:COL` of that file.
//! With a single file the base is 0 and spans are the file's own offsets.

use std::ops::Range;
use std::path::PathBuf;

use super::ConfigError;

/// One file: its name as shown in errors, its text, and where each of its lines starts.
struct SourceFile {
    shown: String,
    base: usize,
    text: String,
    /// Byte offset of each line's first byte (the first is 0).
    starts: Vec<usize>,
}

/// The files of one config, each at its own base offset.
#[derive(Default)]
pub(crate) struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// Adds a file after the last one; its index.
    pub(crate) fn push(&mut self, shown: String, text: String) -> usize {
        let base = self.files.last().map_or(0, |f| f.base + f.text.len() + 1);
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        self.files.push(SourceFile {
            shown,
            base,
            text,
            starts,
        });
        self.files.len() - 1
    }

    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    /// File `i`'s text (empty past the last file).
    pub(crate) fn text(&self, i: usize) -> &str {
        self.files.get(i).map_or("", |f| f.text.as_str())
    }

    /// Where file `i`'s offsets start in the shared space.
    pub(crate) fn base(&self, i: usize) -> usize {
        self.files.get(i).map_or(0, |f| f.base)
    }

    /// File `i`'s name as errors show it.
    pub(crate) fn shown(&self, i: usize) -> &str {
        self.files.get(i).map_or("", |f| f.shown.as_str())
    }

    /// The files in the order read, as shown.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| PathBuf::from(&f.shown)).collect()
    }

    /// The index of the file `offset` is in (the main file for an offset before any).
    pub(crate) fn file_of(&self, offset: usize) -> usize {
        self.files.partition_point(|f| f.base <= offset).saturating_sub(1)
    }

    /// The file, 1-based line and column (in characters) of `offset`; past the end of its
    /// file: that file's end.
    pub(crate) fn locate(&self, offset: usize) -> (&str, usize, usize) {
        let Some(file) = self.files.get(self.file_of(offset)) else {
            return ("", 1, 1);
        };
        let local = offset.saturating_sub(file.base).min(file.text.len());
        let line = file.starts.partition_point(|&s| s <= local).max(1);
        let start = file.starts.get(line - 1).copied().unwrap_or(0);
        let column = file.text.get(start..local).map_or(0, |s| s.chars().count()) + 1;
        (&file.shown, line, column)
    }

    /// `FILE:LINE:COL` of `offset`, as messages that point at a second place write it.
    pub(crate) fn position(&self, offset: usize) -> String {
        let (file, line, column) = self.locate(offset);
        format!("{file}:{line}:{column}")
    }

    /// The error at `span` (its start) in whichever file it is.
    pub(crate) fn error(&self, span: Range<usize>, key: &str, message: &str) -> ConfigError {
        let (path, line, column) = self.locate(span.start);
        ConfigError {
            path: path.to_string(),
            line,
            column,
            key: key.to_string(),
            message: message.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn offsets_resolve_to_their_own_file_line_and_column() {
        let mut map = SourceMap::default();
        assert_eq!(map.push("a.toml".into(), "x = 1\ny = 2\n".into()), 0);
        assert_eq!(map.push("b.toml".into(), "z = \"é\"\nw = 3".into()), 1);
        assert_eq!(map.base(0), 0);
        assert_eq!(map.base(1), 13);
        assert_eq!(map.locate(0), ("a.toml", 1, 1));
        assert_eq!(map.locate(6), ("a.toml", 2, 1));
        // The end of a file is still that file's (an error "at the end").
        assert_eq!(map.locate(12), ("a.toml", 3, 1));
        assert_eq!(map.locate(13), ("b.toml", 1, 1));
        // Columns count characters, not bytes.
        assert_eq!(map.locate(13 + "z = \"é\"".len()), ("b.toml", 1, 8));
        assert_eq!(map.locate(13 + 9), ("b.toml", 2, 1));
        assert_eq!(map.position(13 + 9), "b.toml:2:1");
        // Past the last file: its end.
        assert_eq!(map.locate(1000), ("b.toml", 2, 6));
        let e = map.error(13..14, "k", "m");
        assert_eq!((e.path.as_str(), e.line, e.column), ("b.toml", 1, 1));
    }
}
