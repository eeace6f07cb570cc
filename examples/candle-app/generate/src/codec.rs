//! Text to token ids and back: a Hugging Face `tokenizer.json`, or the byte-level codec of
//! the seeded random-weight models (ids 0-255 are bytes, the specials come from the config).

use std::path::Path;

use tokenizers::Tokenizer;

use crate::{AppResult, app_error};

/// A tokenizer.
pub enum TextCodec {
    /// Ids below 256 are bytes; `bos` starts every prompt.
    Bytes {
        /// The id put before the prompt.
        bos: u32,
    },
    /// A Hugging Face tokenizer.
    Hf(Box<Tokenizer>),
}

impl TextCodec {
    /// The tokenizer of `tokenizer.json` in `dir`.
    pub fn from_dir(dir: &Path) -> AppResult<TextCodec> {
        let file = dir.join("tokenizer.json");
        if !file.is_file() {
            return Err(app_error(format!(
                "{}: no tokenizer.json (the folder is incomplete)",
                dir.display()
            )));
        }
        let tokenizer = Tokenizer::from_file(&file)
            .map_err(|e| app_error(format!("{}: {e}", file.display())))?;
        Ok(TextCodec::Hf(Box::new(tokenizer)))
    }

    /// The prompt's token ids (with the tokenizer's own special tokens, or BOS first).
    pub fn encode(&self, text: &str) -> AppResult<Vec<u32>> {
        match self {
            TextCodec::Bytes { bos } => Ok(std::iter::once(*bos)
                .chain(text.bytes().map(u32::from))
                .collect()),
            TextCodec::Hf(t) => Ok(t
                .encode(text, true)
                .map_err(|e| app_error(format!("tokenizer: {e}")))?
                .get_ids()
                .to_vec()),
        }
    }

    /// The bytes of `ids` as text (special and out-of-range ids are dropped).
    pub fn decode(&self, ids: &[u32]) -> AppResult<String> {
        match self {
            TextCodec::Bytes { .. } => {
                let bytes: Vec<u8> = ids.iter().filter_map(|&i| u8::try_from(i).ok()).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            TextCodec::Hf(t) => t
                .decode(ids, true)
                .map_err(|e| app_error(format!("tokenizer: {e}"))),
        }
    }
}

/// Prints generated text as it comes: decodes all ids so far and prints what was added, so
/// that characters made of several tokens (or bytes) come out whole.
pub struct TextStream {
    ids: Vec<u32>,
    printed: usize,
}

impl TextStream {
    /// An empty stream.
    pub fn new() -> Self {
        TextStream {
            ids: Vec::new(),
            printed: 0,
        }
    }

    /// Adds `id` and returns the new complete text, if any.
    pub fn push(&mut self, codec: &TextCodec, id: u32) -> AppResult<String> {
        self.ids.push(id);
        let text = codec.decode(&self.ids)?;
        // Hold back a trailing replacement character: an unfinished UTF-8 sequence.
        let complete = text.trim_end_matches('\u{fffd}');
        if complete.len() > self.printed && text.is_char_boundary(self.printed) {
            let new = complete[self.printed..].to_string();
            self.printed = complete.len();
            Ok(new)
        } else {
            Ok(String::new())
        }
    }
}

impl Default for TextStream {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_stream_whole_characters() {
        let codec = TextCodec::Bytes { bos: 256 };
        let ids = codec.encode("né").unwrap();
        assert_eq!(ids, vec![256, b'n' as u32, 0xc3, 0xa9]);
        assert_eq!(codec.decode(&ids).unwrap(), "né");
        let mut stream = TextStream::new();
        let pieces: Vec<String> = ids[1..]
            .iter()
            .map(|&i| stream.push(&codec, i).unwrap())
            .collect();
        assert_eq!(pieces, vec!["n", "", "é"]);
    }
}
