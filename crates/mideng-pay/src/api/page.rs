//! Cursor pagination of the lists, as Stripe's: `?limit=&starting_after=`, answered as
//! `{data, has_more}`. A list is in the order its items happened (oldest first, ties by id);
//! the next page starts after the last item of this one, so an item written meanwhile is never
//! skipped and none is shown twice. A cursor that names no item of the caller's is refused,
//! never read as "from the start".

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiError;
use super::error::Code;

/// Items per page unless `limit` says otherwise, and at most.
pub const LIMIT_MAX: u32 = 100;

/// The longest cursor: an id of the service's.
const CURSOR_BYTES_MAX: usize = 64;

/// `?limit=&starting_after=`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PageQuery {
    /// 1 ..= 100 (default 100).
    pub limit: Option<u32>,
    /// The id of the last item of the previous page.
    pub starting_after: Option<String>,
}

/// A page request, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Items wanted.
    pub limit: u32,
    /// After this item.
    pub after: Option<String>,
}

impl Page {
    /// How many to read: one more than wanted, so that `has_more` is known without a count.
    pub fn read_limit(&self) -> u32 {
        self.limit + 1
    }

    /// The page `read` gives for the cursor and [`Page::read_limit`]: `read` answers `None`
    /// when the cursor names no item of the caller's, which is refused ([`unknown_cursor`]).
    pub async fn read<T, Fut>(
        self,
        read: impl FnOnce(Option<String>, u32) -> Fut,
    ) -> Result<PageView<T>, ApiError>
    where
        Fut: std::future::Future<Output = Result<Option<Vec<T>>, mideng::StoreError>>,
    {
        let items = read(self.after.clone(), self.read_limit())
            .await?
            .ok_or_else(unknown_cursor)?;
        Ok(self.answer(items))
    }

    /// `items` (as read with [`Page::read_limit`]) as a page of at most `limit`.
    pub fn answer<T>(&self, mut items: Vec<T>) -> PageView<T> {
        let wanted = usize::try_from(self.limit).unwrap_or(usize::MAX);
        let has_more = items.len() > wanted;
        items.truncate(wanted);
        PageView {
            data: items,
            has_more,
        }
    }
}

impl PageQuery {
    /// The checked request: 400 `invalid-query` for a limit out of range or a cursor that is
    /// not 1 to 64 visible ASCII characters.
    pub fn checked(&self) -> Result<Page, ApiError> {
        let limit = self.limit.unwrap_or(LIMIT_MAX);
        if !(1..=LIMIT_MAX).contains(&limit) {
            return Err(ApiError::new(Code::InvalidQuery, "limit must be 1 to 100"));
        }
        if let Some(after) = &self.starting_after
            && !plausible_id(after)
        {
            return Err(ApiError::new(
                Code::InvalidQuery,
                "starting_after must be an id of this list: 1 to 64 visible ASCII characters",
            ));
        }
        Ok(Page {
            limit,
            after: self.starting_after.clone(),
        })
    }
}

/// Whether `text` could be an id of the service's, as a cursor, an event id or a query's id is
/// read: 1 to 64 visible ASCII characters.
pub fn plausible_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= CURSOR_BYTES_MAX
        && text.bytes().all(|byte| byte.is_ascii_graphic())
}

/// The refusal of a cursor that names no item of the caller's list.
pub fn unknown_cursor() -> ApiError {
    ApiError::new(
        Code::InvalidQuery,
        "starting_after names no item of this list (of yours, within the retention)",
    )
}

/// One page of a list.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct PageView<T> {
    /// The items, in the order they happened.
    pub data: Vec<T>,
    /// Whether more follow: ask again with `starting_after` the last item's id.
    pub has_more: bool,
}

impl<T> PageView<T> {
    /// The same page with each item rendered by `view`.
    pub fn map<U>(self, view: impl FnMut(T) -> U) -> PageView<U> {
        PageView {
            data: self.data.into_iter().map(view).collect(),
            has_more: self.has_more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_one_more_than_it_shows_and_says_whether_more_follow() {
        let page = PageQuery {
            limit: Some(2),
            starting_after: Some("evt_1".to_owned()),
        }
        .checked()
        .expect("valid");
        assert_eq!(page.read_limit(), 3);
        assert_eq!(
            page.answer(vec![1, 2, 3]),
            PageView {
                data: vec![1, 2],
                has_more: true
            }
        );
        assert_eq!(
            page.answer(vec![1, 2]),
            PageView {
                data: vec![1, 2],
                has_more: false
            }
        );
        assert_eq!(
            PageQuery::default().checked().map(|page| page.limit).ok(),
            Some(100)
        );
        for refused in [
            PageQuery {
                limit: Some(0),
                starting_after: None,
            },
            PageQuery {
                limit: Some(101),
                starting_after: None,
            },
            PageQuery {
                limit: None,
                starting_after: Some(String::new()),
            },
            PageQuery {
                limit: None,
                starting_after: Some("a b".to_owned()),
            },
            PageQuery {
                limit: None,
                starting_after: Some("x".repeat(65)),
            },
        ] {
            assert!(refused.checked().is_err(), "{refused:?}");
        }
    }
}
