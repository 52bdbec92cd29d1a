"""Every text the bot shows: Telegram messages, toasts, the command menu and endpoint bodies.

The bot speaks BOT_LANGUAGE: Chinese (``zh``, the original's language and the default) or
English (``en``). Each text is a gettext message whose id is the Chinese text; the English
catalogue is ``bots/locale/en/LC_MESSAGES/django.po`` (compiled to ``django.mo`` next to it).
Texts are built when called (never at import) and always in the bot's language, whatever
language the surrounding request has activated (the Django admin, for instance, stays English).
"""

from __future__ import annotations

from django.utils import translation

from bots.conf import DEFAULT_BOT_LANGUAGE, bot_language
from bots.selectors import MODE_BUTTON, MODE_TURNSTILE


def _(message: str) -> str:
    """``message`` in the bot's language.

    Chinese is the catalogue's source language, so it needs no lookup (and must not get one:
    Django would fall back to the project's LANGUAGE_CODE, English, for a language without a
    catalogue).
    """
    language = bot_language()
    if language == DEFAULT_BOT_LANGUAGE:
        return message
    with translation.override(language):
        return translation.gettext(message)


def _join(names: list[str]) -> str:
    return _("、").join(names)


PROJECT_URL = "https://github.com/huaiminyetnotsleep/hodor"

# ------------------------------------------------------------------ private chat (user side)


def welcome_default() -> str:
    return _(
        "你好，这里是 hodor 私聊客服机器人。\n"
        "直接发送消息即可，不需要任何命令；客服的回复会出现在这里。\n"
        "项目地址：{url}"
    ).format(url=PROJECT_URL)


def ban_notice() -> str:
    return _("你已被禁言，发送的消息不会送达客服。")


def challenge_math(question: str) -> str:
    return _("为了确认你是真人，请回答下面的问题：\n{question}").format(question=question)


def challenge_button() -> str:
    return _("请点击下方按钮，确认你不是机器人。")


def challenge_button_label() -> str:
    return _("我不是机器人")


def rate_limited_prefix(limit: int) -> str:
    return _(
        "发送太快了：每分钟最多 {limit} 条消息，刚才这条没有送达。请重新完成验证后再发送。"
    ).format(limit=limit)


def wrong_answer_prefix() -> str:
    return _("回答错误，请再试一次。")


def toast_wrong_answer() -> str:
    return _("回答错误，请再试一次。")


def toast_challenge_expired() -> str:
    return _("验证已失效，请发送任意消息获取新的验证。")


def toast_verified() -> str:
    return _("验证通过！")


def verified_message() -> str:
    return _("✅ 验证通过，现在可以发送消息了。")


# ------------------------------------------------------------------ support group (admin side)


def admins_only() -> str:
    return _("此命令仅限客服管理员使用。")


def no_binding() -> str:
    return _("找不到对应的用户：这个话题没有有效的绑定（从未建立或已关闭），请不要在这里继续回复。")


def closed_topic_reply(thread_id: int, text: str) -> str:
    """An answer meant for a closed topic, posted in General instead (issue 36)."""
    return _("（话题 {thread_id} 已关闭，回复改发在 General）").format(thread_id=thread_id) + (
        f"\n{text}"
    )


def reply_not_relayed_archived(user_id: int, thread_id: int) -> str:
    return _(
        "⚠️ 未转发：用户 {user_id} 的会话（话题 {thread_id}）已归档，这条回复没有发给用户。"
        "用户再次发消息并通过验证后会重新打开话题。"
    ).format(user_id=user_id, thread_id=thread_id)


def reply_not_relayed_closed(user_id: int, thread_id: int) -> str:
    return _(
        "⚠️ 未转发：无法重新打开用户 {user_id} 的话题（{thread_id}），这条回复没有发给用户。"
    ).format(user_id=user_id, thread_id=thread_id)


def reply_refused_by_user(reason: str) -> str:
    return _(
        "⚠️ 回复未送达：用户已屏蔽机器人或账号已不可用（Telegram：{reason}）。"
        "在此之前，之后的回复也不会送达；此提示只发一次。"
    ).format(reason=reason)


def reply_not_delivered(reason: str) -> str:
    return _("⚠️ 这条回复未送达用户（Telegram：{reason}）。").format(reason=reason)


def risk_reminder(name: str) -> str:
    return _("⚠️ 高危用户来信，请谨慎处理：{name}").format(name=name)


def card_nickname(name: str) -> str:
    return _("昵称：{name}").format(name=name)


def card_user_id(user_id: int) -> str:
    return _("用户 ID：{user_id}").format(user_id=user_id)


def card_first_seen(minute: str) -> str:
    return _("首次对话：{minute} (UTC)").format(minute=minute)


def card_verified() -> str:
    return _("验证状态：✅ 已验证")


def card_unverified() -> str:
    return _("验证状态：❌ 未验证")


def card_verification_disabled() -> str:
    return _("验证状态：未启用")


def card_risk() -> str:
    return _("⚠️ 高危用户")


def card_note(note: str) -> str:
    return _("备注：{note}").format(note=note)


# ------------------------------------------------------------------ admin commands (spec §4)


def unknown_command() -> str:
    return _("未知命令，发送 /help 查看全部命令。")


def use_in_general() -> str:
    return _("验证设置命令只能在 General 中使用，本次未做任何更改。")


def broadcast_in_general() -> str:
    return _("请在 General 中发起广播。")


def user_banned(user_id: int) -> str:
    return _("已禁言用户 {user_id}。").format(user_id=user_id)


def user_unbanned(user_id: int) -> str:
    return _("已解除用户 {user_id} 的禁言。").format(user_id=user_id)


def note_usage() -> str:
    return _("用法：/note <备注内容>")


def note_saved(note: str) -> str:
    return _("备注已保存：{note}").format(note=note)


def note_cleared() -> str:
    return _("备注已清除。")


def risk_marked(user_id: int) -> str:
    return _("已将用户 {user_id} 标记为高危用户（话题内每 24 小时最多提醒一次）。").format(
        user_id=user_id
    )


def risk_cleared(user_id: int) -> str:
    return _("已取消用户 {user_id} 的高危标记。").format(user_id=user_id)


def archive_started() -> str:
    return _("正在归档：将清除该用户的验证状态，用户资料、消息记录和备注都会保留。")


def archive_failed(user_id: int, thread_id: int) -> str:
    return _("归档未执行：无法关闭用户 {user_id} 的话题（{thread_id}），未做任何更改。").format(
        user_id=user_id, thread_id=thread_id
    )


def archive_done(user_id: int, thread_id: int) -> str:
    return _(
        "已归档用户 {user_id} 的会话（话题 {thread_id}）：话题已关闭，验证已清除，"
        "资料、消息记录和备注均保留。用户再次发消息并通过验证后会重新打开话题。"
    ).format(user_id=user_id, thread_id=thread_id)


def archive_topic_gone() -> str:
    return _("原话题已不存在；用户回来时会新建话题。")


def archive_notice_failed() -> str:
    return _("未能通知用户（私聊消息未送达）。")


def archive_notice() -> str:
    """The archived user's DM (no notice slot: the admin asked for it)."""
    return _("本次会话已结束。如需再次联系客服，请发送 /start。")


def verification_turned_on() -> str:
    return _("人机验证已开启；之前已通过验证的用户不受影响。")


def verification_turned_off() -> str:
    return _("人机验证已暂时关闭；验证记录会保留，重新开启后，已通过且未过期的用户无需再次验证。")


def mode_label(mode: str) -> str:
    """The verification mode as admins read it (math, pure button, Turnstile)."""
    if mode == MODE_BUTTON:
        return _("纯按钮")
    if mode == MODE_TURNSTILE:
        return _("Turnstile 网页验证")
    return _("算术题")


def verification_mode_current(*, mode: str, enabled: bool) -> str:
    state = _("验证已开启") if enabled else _("验证已关闭")
    return _(
        "当前验证方式：{mode}（{state}）\n"
        "切换：/verifymode_math、/verifymode_button、/verifymode_turnstile，"
        "或 /verifymode math|button|turnstile"
    ).format(mode=mode_label(mode), state=state)


def verification_mode_usage() -> str:
    return _("用法：/verifymode 查看当前方式；/verifymode math|button|turnstile 切换方式。")


def verification_mode_set_math() -> str:
    return _(
        "验证方式已设为：算术题。切换方式会使之前发出的题目失效，用户下次发消息时会收到新题目。"
    )


def verification_mode_set_button() -> str:
    return _(
        "验证方式已设为：纯按钮。⚠️ 纯按钮验证很弱，机器人也能点击通过。"
        "切换方式会使之前发出的题目失效，用户下次发消息时会收到新题目。"
    )


def help_text(*, verification_enabled: bool, mode: str) -> str:
    """/help (spec §4.1): the commands, the verification section reflecting the switches."""
    lines = [
        _("管理命令（在用户的话题中使用）："),
        _("/help — 查看本帮助"),
        _("/ban — 禁言该用户"),
        _("/unban — 解除禁言"),
        _("/note <文字> — 设置备注（显示在置顶信息中）"),
        _("/unnote — 清除备注"),
        _("/risk — 标记为高危用户"),
        _("/unrisk — 取消高危标记"),
        _(
            "/broadcast <标题> — 向全部用户发送公告"
            "（在 General 中使用；正文从第二行起，先预览再确认）"
        ),
        _("/archive — 归档会话：关闭话题并清除验证，资料和记录保留"),
        _("/deluser — 彻底删除该用户的数据（需二次确认）"),
        _("/purgemsg — 删除话题内已记录的消息"),
        "",
        _("人机验证："),
    ]
    if verification_enabled:
        lines.append(_("/verifyoff — 关闭验证"))
    else:
        lines += [_("/verifyon — 开启验证"), _("当前验证已关闭。")]
    lines += [
        _("/verifymode — 查看验证方式（当前：{mode}）").format(mode=mode_label(mode)),
        _("/verifymode_math — 切换为算术题"),
        _("/verifymode_button — 切换为纯按钮"),
        _("/verifymode_turnstile — 切换为 Turnstile 网页验证"),
        _("验证设置命令只能在 General 中使用；也可以写成 /verifymode math|button|turnstile。"),
        _("⚠️ 纯按钮验证很弱，机器人也能点击通过。"),
        "",
        _("危险操作："),
        _("/wipealldata — 清空全部话题与数据（需二次确认）"),
        "",
        _("以 / 开头的消息不会转发给用户。"),
    ]
    return "\n".join(lines)


def command_menu() -> list[tuple[str, str]]:
    """The admin commands registered by setwebhook (spec §1.4), in menu order: the original's
    18."""
    return [
        ("help", _("查看全部命令")),
        ("ban", _("禁言当前话题的用户")),
        ("unban", _("解除禁言")),
        ("note", _("设置用户备注")),
        ("unnote", _("清除用户备注")),
        ("risk", _("标记为高危用户")),
        ("unrisk", _("取消高危标记")),
        ("verifyon", _("开启人机验证（General）")),
        ("verifyoff", _("关闭人机验证（General）")),
        ("verifymode", _("查看或切换验证方式（General）")),
        ("verifymode_math", _("切换为算术验证（General）")),
        ("verifymode_button", _("切换为按钮验证（General）")),
        ("verifymode_turnstile", _("切换为 Turnstile 网页验证（General）")),
        ("archive", _("归档当前会话")),
        ("deluser", _("彻底删除该用户的数据（需确认）")),
        ("purgemsg", _("删除话题内已记录的消息")),
        ("broadcast", _("向全部用户发送公告（General）")),
        ("wipealldata", _("清空全部话题与数据（需确认）")),
    ]


# ------------------------------------------------------------------ /deluser (spec §4.8)


def cancel_label() -> str:
    return _("取消")


def deluser_prompt(user_id: int) -> str:
    return _(
        "⚠️ 确认要彻底删除用户 {user_id} 吗？\n"
        "将删除：hodor 中该用户的资料、话题绑定和消息记录，"
        "以及客服群里的这个话题和其中的全部消息。\n"
        "用户与机器人的私聊记录不受影响。\n"
        "此操作不可撤销，请在 60 秒内确认。"
    ).format(user_id=user_id)


def deluser_confirm_label() -> str:
    return _("确认彻底删除")


def toast_deluser_failed() -> str:
    return _("Telegram 未能删除，数据已保留。")


def deluser_expired() -> str:
    return _("确认已超时，请重新发送 /deluser。")


def deluser_cancelled() -> str:
    return _("已取消，未删除任何内容。")


def toast_deluser_done() -> str:
    return _("群内话题和 hodor 数据已删除；私聊记录保留。")


# ------------------------------------------------------------------ /purgemsg (spec §4.9)


def purge_done(count: int) -> str:
    return _("清理完成：已删除 {count} 条消息。").format(count=count)


def purge_already_gone(count: int) -> str:
    return _("{count} 条消息已不存在。").format(count=count)


def purge_failed(count: int) -> str:
    return _("⚠️ {count} 条消息删除失败（机器人可能缺少删除权限），已不再跟踪，请手动删除。").format(
        count=count
    )


def purge_card_pinned() -> str:
    return _("已重新发送并置顶用户信息。")


def purge_card_not_pinned() -> str:
    return _("用户信息未能重新置顶；用户下次发消息时会重新发送。")


def purge_continues(done: int, total: int) -> str:
    return _("已删除 {done}/{total} 条消息，其余的在后台继续删除，完成后会在这里报告。").format(
        done=done, total=total
    )


def purge_interrupted() -> str:
    return _("⚠️ 清理中断：Telegram 多次没有响应。请再次发送 /purgemsg 完成清理。")


def bulk_busy() -> str:
    return _("另一项清理或清空任务正在进行，请等它报告完成后再试。")


# ------------------------------------------------------------------ /wipealldata (spec §4.10)


def wipe_warning() -> str:
    return _(
        "⚠️ 危险操作：清空全部数据\n"
        "将删除：客服群中除 General 外的全部用户话题及其中的消息；"
        "全部用户及其验证、禁言和备注状态；全部话题绑定；全部消息记录。\n"
        "将保留：设置、processed_updates 和 bots 表；用户与机器人的私聊记录。\n"
        "请在 60 秒内确认。"
    )


def wipe_confirm_label() -> str:
    return _("⚠️ 确认清空")


def toast_wipe_timeout() -> str:
    return _("已超时（60 秒），本次操作已放弃，请重新发送 /wipealldata。")


def toast_wipe_cancelled() -> str:
    return _("已取消，未清空任何数据。")


def toast_wipe_already_decided() -> str:
    return _("这次确认已经处理过了。")


def toast_wiping() -> str:
    return _("已确认，正在清空……")


def wipe_continues(done: int, total: int) -> str:
    return _(
        "清空进行中：已删除 {done}/{total} 个话题，其余的在后台继续删除，完成后会在这里报告。"
    ).format(done=done, total=total)


def wipe_failed(count: int) -> str:
    return _(
        "⚠️ {count} 个话题删除失败，数据未清空。请检查机器人的权限后再次发送 /wipealldata。"
    ).format(count=count)


def wipe_done() -> str:
    return _("全部话题和数据已删除。")


def wipe_interrupted() -> str:
    return _("⚠️ 清空中断：Telegram 多次没有响应，数据未清空。请再次发送 /wipealldata。")


# ------------------------------------------------------------------ /broadcast (spec §7)


def broadcast_usage() -> str:
    return _("用法：在 General 中发送“/broadcast <标题>”，正文从第二行开始写。")


def broadcast_bot_name_failed() -> str:
    return _("无法获取机器人名称，广播未开始。")


def broadcast_too_long(length: int) -> str:
    return _(
        "公告太长：可见文字共 {length} 个字符（按 UTF-16 计），超过 Telegram 的 4096 上限，"
        "未创建广播。请缩短后重试。"
    ).format(length=length)


def broadcast_draft_exists() -> str:
    return _("已有一条广播在等待确认：请先确认或取消它，或等它过期（5 分钟）。")


def broadcast_no_recipients() -> str:
    return _("没有符合条件的用户，未创建广播。")


def broadcast_too_many(limit: int) -> str:
    return _("符合条件的用户超过 {limit} 人，未创建广播。").format(limit=limit)


def broadcast_preview_failed() -> str:
    return _("预览发送失败，广播未发送。")


def broadcast_control_failed() -> str:
    return _("控制消息发送失败，确认按钮无效，广播未发送。")


def broadcast_control(count: int) -> str:
    return _(
        "📋 广播确认（尚未发送）\n"
        "预计收件人：{count}\n"
        "请在 5 分钟内确认，超时作废；只有发起的管理员可以操作。"
    ).format(count=count)


def broadcast_confirm_label() -> str:
    return _("确认发送")


def broadcast_control_invalid() -> str:
    return _("⚠️ 这条广播的按钮已失效（未发送），请重新发起。")


def broadcast_expired() -> str:
    return _("⌛ 广播预览已过期（未发送）。")


def broadcast_cancelled() -> str:
    return _("🚫 广播已取消（未发送）。")


def broadcast_nobody_to_send() -> str:
    return _("没有可发送的用户，广播已取消（未发送）。")


def broadcast_too_many_to_send(limit: int) -> str:
    return _("可发送的用户超过 {limit} 人，广播已取消（未发送）。").format(limit=limit)


def broadcast_sending(sent: int, failed: int, remaining: int) -> str:
    return _("📤 正在发送……\n已发送 {sent}，失败 {failed}，剩余 {remaining}").format(
        sent=sent, failed=failed, remaining=remaining
    )


def broadcast_done(sent: int, failed: int) -> str:
    return _(
        "✅ 广播完成：成功 {sent}，失败 {failed}\n"
        "（成功 = Telegram 已接收，不代表已读；失败的不会重发）"
    ).format(sent=sent, failed=failed)


def broadcast_interrupted(sent: int, failed: int, remaining: int) -> str:
    return _(
        "⚠️ 广播已中断：已发送 {sent}，失败 {failed}，未发送 {remaining}；不会自动补发。"
    ).format(sent=sent, failed=failed, remaining=remaining)


def broadcast_unknown(count: int) -> str:
    """Added to the statistics when a send loop died during some sends."""
    return _("另有 {count} 位在发送时发送进程中断，是否送达未知，不会重发。").format(count=count)


def toast_broadcast_missing() -> str:
    return _("这条广播已处理或不存在。")


def toast_broadcast_not_initiator() -> str:
    return _("只有发起广播的管理员可以确认或取消。")


def toast_broadcast_expired() -> str:
    return _("预览已过期，请重新发起广播。")


def toast_broadcast_cancelled() -> str:
    return _("广播已取消。")


def toast_broadcast_busy() -> str:
    return _("已有一条广播正在发送，请稍后再试。")


def toast_broadcast_sending() -> str:
    return _("正在发送，请稍候。")


def toast_broadcast_completed() -> str:
    return _("广播已完成。")


def toast_broadcast_confirmed() -> str:
    return _("已确认，开始发送。")


def toast_broadcast_interrupted() -> str:
    return _("广播已中断。")


# ------------------------------------------------------------------ HTTP endpoints


def invalid_admin_key() -> str:
    return _("无效的管理密钥")


def config_missing(names: list[str]) -> str:
    return _("配置缺失：{names}").format(names=_join(names))


def telegram_call_failed(method: str) -> str:
    return _("{method} 调用失败").format(method=method)


# ------------------------------------------------------------------ selfcheck items


def check_missing_required(names: list[str]) -> str:
    return _("缺少必填环境变量：{names}").format(names=", ".join(names))


def check_support_chat_id_invalid() -> str:
    return _("SUPPORT_CHAT_ID 无效：必须是以 -100 开头的超级群 ID")


def check_admin_ids_none_valid() -> str:
    return _("ADMIN_IDS 无效：没有任何有效的用户 ID")


def check_admin_ids_token_invalid(position: int) -> str:
    return _("ADMIN_IDS 第 {position} 项不是有效的用户 ID，已忽略").format(position=position)


def check_secrets_equal(first: str, second: str) -> str:
    return _("{first} 与 {second} 不能相同").format(first=first, second=second)


def check_number_invalid(name: str, default: int) -> str:
    return _("{name} 的值无效，运行时按默认值 {default} 处理").format(name=name, default=default)


def check_turnstile_half_configured(present: str, missing: str) -> str:
    return _("Turnstile 配置不完整：已设置 {present}，缺少 {missing}").format(
        present=present, missing=missing
    )


def check_turnstile_mode_without_keys() -> str:
    return _("验证方式为 turnstile，但 TURNSTILE_SITE_KEY / TURNSTILE_SECRET_KEY 未配置")


def check_turnstile_test_key(name: str) -> str:
    return _("{name} 是 Cloudflare 官方测试密钥，任何人都能通过验证").format(name=name)


def check_public_base_url_invalid() -> str:
    return _("PUBLIC_BASE_URL 无效：必须是不含路径、查询和凭据的 https 源地址，已按未设置处理")


def check_bot_language_invalid() -> str:
    return _("BOT_LANGUAGE 的值无效（可选 zh、en），运行时按 zh 处理")


def check_settings_unreadable() -> str:
    return _("无法读取验证设置（settings 表）")


def check_tables_missing(names: list[str]) -> str:
    return _("缺少数据表：{names}（请运行 migrate）").format(names=", ".join(names))


def check_tables_unreadable() -> str:
    return _("无法查询数据表")


def check_webhook_cannot_check() -> str:
    return _("未配置 TELEGRAM_BOT_TOKEN，无法检查 webhook")


def check_webhook_info_failed(detail: str) -> str:
    return _("getWebhookInfo 失败：{detail}").format(detail=detail)


def check_webhook_not_bound() -> str:
    return _("webhook 未绑定：请访问 /telegram/setwebhook/<ADMIN_SECRET>")


def check_webhook_points_elsewhere(url: str) -> str:
    return _("webhook 指向其他地址：{url}").format(url=url)


def check_webhook_last_error(message: str) -> str:
    return _("Telegram 最近一次投递失败：{message}").format(message=message)


# ------------------------------------------------------------------ Turnstile web verification


def challenge_turnstile() -> str:
    return _(
        "请点击下方按钮打开验证页面完成人机验证。链接 10 分钟内有效；"
        "过期后发送任意消息即可获取新的链接。"
    )


def challenge_turnstile_button() -> str:
    return _("打开验证页面")


def verification_unavailable() -> str:
    """Turnstile mode, but no challenge can be issued (keys or https origin missing)."""
    return _("人机验证暂时不可用，刚才的消息没有送达客服，请稍后再试。")


def turnstile_missing_keys(names: list[str]) -> str:
    return _("无法切换为 Turnstile 网页验证：缺少 {names}。验证方式未改变。").format(
        names=", ".join(names)
    )


def verification_mode_set_turnstile() -> str:
    return _(
        "验证方式已设为：Turnstile 网页验证。用户会收到一个打开验证页面的按钮"
        "（链接 10 分钟内有效），在页面中通过 Cloudflare Turnstile 后即可发送消息。"
        "切换方式会使之前发出的题目失效，用户下次发消息时会收到新的验证。"
    )


def check_turnstile_no_https_origin() -> str:
    return _(
        "验证方式为 turnstile，但验证页面没有可用的 https 地址：请设置 PUBLIC_BASE_URL"
        "（本次请求不是通过 https 到达的）"
    )


# The submit API's error messages (spec §5.5); the page shows them as they come.


def verify_error_origin() -> str:
    return _("请求来源不正确，请从机器人对话中打开验证页面。")


def verify_error_invalid_request() -> str:
    return _("请求格式不正确，请从机器人对话中重新打开验证页面。")


def verify_error_too_large() -> str:
    return _("请求内容过大。")


def verify_error_unavailable() -> str:
    return _("验证服务暂时不可用，请稍后再试。")


def verify_error_mode_changed() -> str:
    return _("当前没有使用网页验证，请回到机器人对话发送任意消息。")


def verify_error_identity() -> str:
    return _("身份校验失败或已过期，请回到机器人对话重新打开验证页面。")


def verify_error_no_user() -> str:
    return _("找不到你的记录，请先给机器人发送一条消息。")


def verify_error_banned() -> str:
    return _("你已被禁言，无法完成验证。")


def verify_error_already_verified() -> str:
    return _("你已经通过验证，可以直接回到对话发送消息。")


def verify_error_other_account() -> str:
    return _("这个验证链接属于其他账号，请从你自己的机器人对话中打开。")


def verify_error_link_superseded() -> str:
    return _("这个验证链接已失效，请回到机器人对话发送任意消息获取新的链接。")


def verify_error_link_expired() -> str:
    return _("验证链接已过期（10 分钟），请回到机器人对话发送任意消息获取新的链接。")


def verify_error_too_many_requests(seconds: int) -> str:
    return _("提交太频繁，请 {seconds} 秒后再试。").format(seconds=seconds)


def verify_error_token_rejected() -> str:
    return _("人机验证没有通过，请重试。")


def verify_page_bad_link() -> str:
    """The plain-text 400 of a malformed ``r``."""
    return _("验证链接无效，请从机器人对话中的按钮打开。")


# The page's own texts (client-side states).


def verify_page_title() -> str:
    return _("人机验证")


def verify_page_outside_telegram() -> str:
    return _("请从 Telegram 机器人对话中的按钮打开此页面。")


def verify_page_loading() -> str:
    return _("正在加载验证…")


def verify_page_challenge() -> str:
    return _("请完成下方的验证，完成后会自动提交。")


def verify_page_submitting() -> str:
    return _("正在提交…")


def verify_page_verified() -> str:
    return _("✅ 验证通过！现在可以回到对话发送消息了。")


def verify_page_waiting() -> str:
    """``{seconds}`` is filled in by the page's script while it counts down."""
    return _("提交太频繁，{seconds} 秒后自动重试…")


def verify_page_network_error() -> str:
    return _("网络连接失败，请检查网络后从机器人对话重新打开验证页面。")


def verify_page_widget_failed() -> str:
    return _("验证组件加载失败，请点击重试。")


def verify_page_retry() -> str:
    return _("重试")


def verify_page_close() -> str:
    return _("返回对话")
