//! `[global] user` / `group`: resolved through the system's user database at load, so
//! `check` and a reload report an unknown name with its position, and a worker only has to
//! switch ids (`master::privileges`).

use std::ops::Range;

use toml::Spanned;

use super::file::GlobalSection;
use super::model::RunAs;

/// A refusal: the span and key path at fault, and the message.
type Refusal = (Range<usize>, &'static str, String);

/// The ids workers switch to, or `None` without `user`. A name is looked up first; a number
/// that is no user's name is taken as the uid itself (then `group` is required).
pub(super) fn run_as(g: &GlobalSection) -> Result<Option<RunAs>, Refusal> {
    let Some(user) = &g.user else {
        return match &g.group {
            Some(group) => Err((group.span(), "global.group", "`group` needs `user`".into())),
            None => Ok(None),
        };
    };
    let name = user.get_ref();
    let refuse = |msg: String| (user.span(), "global.user", msg);
    let found = tollgate_sys::credentials::user_by_name(name)
        .map_err(|e| refuse(format!("cannot look up user `{name}`: {e}")))?;
    let (uid, primary_gid) = match (found, name.parse::<u32>()) {
        (Some(ids), _) => (ids.uid, Some(ids.gid)),
        (None, Ok(uid)) => (uid, None),
        (None, Err(_)) => return Err(refuse(format!("no user `{name}` on this system"))),
    };
    let gid = match (&g.group, primary_gid) {
        (Some(group), _) => group_id(group, "global.group")?,
        (None, Some(gid)) => gid,
        (None, None) => {
            return Err(refuse(
                "a numeric `user` that is not in the user database needs `group`".into(),
            ));
        }
    };
    Ok(Some(RunAs {
        user: name.clone(),
        uid,
        gid,
    }))
}

/// A group name (or a number that is no group's name) as a gid; `key` is the refused key.
pub(super) fn group_id(group: &Spanned<String>, key: &'static str) -> Result<u32, Refusal> {
    let name = group.get_ref();
    let refuse = |msg: String| (group.span(), key, msg);
    let found = tollgate_sys::credentials::group_by_name(name)
        .map_err(|e| refuse(format!("cannot look up group `{name}`: {e}")))?;
    match (found, name.parse::<u32>()) {
        (Some(gid), _) | (None, Ok(gid)) => Ok(gid),
        (None, Err(_)) => Err(refuse(format!("no group `{name}` on this system"))),
    }
}
