// Query and document examples. The Korean one is the transformer tutorials' ("랭체인 뭐야": "what is
// LangChain"); the Vietnamese and English ones are LibreOffice help, the default model's training
// domain ("insert a table"). In each the relevant document is not listed first, so that the
// ranking by relevance score has something to do.
export const PRESETS = [
  {
    name: 'Korean',
    query: '랭체인 뭐야',
    docs: ['오늘 저녁에는 김치찌개를 먹었다', '랭체인은 대규모 언어 모델로 애플리케이션을 만드는 프레임워크입니다'],
  },
  {
    name: 'Vietnamese',
    query: 'chèn bảng',
    docs: [
      'Đặt lề trái, phải, trên và dưới của trang.',
      'Để chèn một bảng mới vào tài liệu, hãy chọn Bảng - Chèn bảng.',
      'Tôi yêu Việt Nam quá',
    ],
  },
  {
    name: 'English',
    query: 'insert a table',
    docs: ['Sets the left, right, top and bottom page margins.', 'To insert a new table into the document, choose Table - Insert Table.'],
  },
];

// Sources for the built-in translation model (checkpoints/translation), a multilingual Marian
// model whose source starts with the target language's token; a LibreOffice help title.
export const TRANSLATION_PRESETS = [
  { name: 'English → Vietnamese', text: '>>vie<< Inserting Tables' },
  { name: 'English → Korean', text: '>>kor<< Inserting Tables' },
];
